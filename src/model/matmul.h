// Matmuls on oneDNN with primitives cached per shape (creating one per call is slow).
//
// C = A @ B (+ bias) (+ C when accumulating), batched over up to two leading dims.
// Operands are described by dims and strides in elements, so transposes and strided
// views (Q/K/V heads inside the fused qkv tensor) need no copies. A and B are fp32 or
// bf16 (both the same); bias and C are always fp32 (fp32 accumulation).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace rt::model {

enum class MatType { kF32, kBf16 };

// A tensor of 2..4 dims; the last two are the matrix, the others batch dims.
struct MatOperand {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;  // elements
};

// Row-major (rows, cols) matrix with leading dimension ld.
MatOperand RowMajor(int64_t rows, int64_t cols, int64_t ld);
// The transpose of a row-major (cols, rows) matrix with leading dimension ld, seen as (rows, cols).
MatOperand Transposed(int64_t rows, int64_t cols, int64_t ld);

class MatmulEngine {
 public:
  MatmulEngine();
  // c = a @ b (+ bias[n]) (+ c if accumulate). a: (..., M, K), b: (..., K, N), c: (..., M, N).
  // `in` is the type of a and b. bias may be null.
  void Run(MatType in, const MatOperand& ad, const void* a, const MatOperand& bd, const void* b,
           const MatOperand& cd, float* c, const float* bias, bool accumulate);
  // Name of the oneDNN implementation chosen for this shape (e.g. "brg:avx512_core"), for tests.
  std::string ImplName(MatType in, const MatOperand& ad, const MatOperand& bd, const MatOperand& cd,
                       bool has_bias, bool accumulate);
  size_t cached_primitives() const { return cache_.size(); }

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c, bias;
    std::string impl;
  };
  Entry& Get(MatType in, const MatOperand& ad, const MatOperand& bd, const MatOperand& cd,
             bool has_bias, bool accumulate);

  static constexpr size_t kMaxCachedPrimitives = 1024;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<std::vector<int64_t>, std::unique_ptr<Entry>> cache_;
};

}  // namespace rt::model
