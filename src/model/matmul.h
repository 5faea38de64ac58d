// Matmuls on oneDNN with primitives cached per shape (creating one per call is slow).
//
// C = A @ B (+ bias) (+ C when accumulating), batched over up to two leading dims.
// Operands are described by dims and strides in elements, so transposes and strided
// views (Q/K/V heads inside the fused qkv tensor) need no copies. A and B are fp32 or
// bf16 (both the same); bias and C are always fp32 (fp32 accumulation).
//
// Errors: oneDNN reports failures by throwing dnnl::error (a bf16 matmul on a CPU, or
// under an ISA cap, where oneDNN has no bf16 kernel; an impossible descriptor). This
// file is the only one that creates oneDNN objects, and no exception leaves it: the
// project's errors are absl::Status values (STYLE). A failure becomes the engine's
// status(), which names the operation, the shape (dims, strides, types) and the ISA
// oneDNN runs. It is sticky (the first failure is kept) rather than returned by each
// Run(): a model step runs some twenty matmuls per block through helpers that return
// nothing, so Gpt checks status() once per call instead of threading a Status through
// every one of them. The output of a failed Run, and of every Run after it, is filled
// with NaN (not zeros), so a caller that forgot to check cannot take it for a result.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/status.h"

namespace rt::model {

enum class MatType { kF32, kBf16 };

// The operand `elems` elements past p, for a matmul operand of type t.
inline const void* OperandAt(const void* p, MatType t, int64_t elems) {
  return static_cast<const char*>(p) + elems * (t == MatType::kBf16 ? 2 : 4);
}

// A tensor of 2..4 dims; the last two are the matrix, the others batch dims.
struct MatOperand {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;  // elements
};

// Row-major (rows, cols) matrix with leading dimension ld.
MatOperand RowMajor(int64_t rows, int64_t cols, int64_t ld);
// The transpose of a row-major (cols, rows) matrix with leading dimension ld, seen as (rows, cols).
MatOperand Transposed(int64_t rows, int64_t cols, int64_t ld);

// Whether the ISA oneDNN dispatches to, capped by ONEDNN_MAX_CPU_ISA or RINGTRAIN_ISA
// (applied first: model/onednn_isa.h), runs bf16 matmuls natively (AVX512-BF16 or AMX).
// Without it oneDNN either emulates bf16 (AVX-512 without bf16: slower than fp32) or
// has no bf16 matmul at all (AVX2 and below: creating one fails).
bool OneDnnHasNativeBf16();

class MatmulEngine {
 public:
  MatmulEngine();
  // c = a @ b (+ bias[n]) (+ c if accumulate). a: (..., M, K), b: (..., K, N), c: (..., M, N).
  // `in` is the type of a and b. bias may be null. On a oneDNN failure, or once status()
  // is not OK, fills c's elements with NaN instead (see the file comment).
  void Run(MatType in, const MatOperand& ad, const void* a, const MatOperand& bd, const void* b,
           const MatOperand& cd, float* c, const float* bias, bool accumulate);
  // Name of the oneDNN implementation chosen for this shape (e.g. "brg:avx512_core"), for
  // tests and reports; "" if it cannot be created (status() says why).
  std::string ImplName(MatType in, const MatOperand& ad, const MatOperand& bd, const MatOperand& cd,
                       bool has_bias, bool accumulate);
  // The first oneDNN failure of this engine (OK if none).
  const absl::Status& status() const { return status_; }
  size_t cached_primitives() const { return cache_.size(); }

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c, bias;
    std::string impl;
  };
  // The cached primitive for this shape, created if new; null on failure (status_ set).
  Entry* Get(MatType in, const MatOperand& ad, const MatOperand& bd, const MatOperand& cd,
             bool has_bias, bool accumulate);
  // Creates engine_ and stream_ on first use (a MatmulEngine that only sizes memory, as
  // for `ringtrain plan`, never starts oneDNN). False on failure (status_ set).
  bool StartOneDnn();
  // Keeps the first failure: `what` ("create", "run") of the matmul of this shape.
  void Fail(const char* what, MatType in, const MatOperand& ad, const MatOperand& bd,
            const MatOperand& cd, bool has_bias, bool accumulate, const std::string& cause);

  static constexpr size_t kMaxCachedPrimitives = 1024;
  bool started_ = false;
  dnnl::engine engine_;
  dnnl::stream stream_;
  absl::Status status_;
  std::map<std::vector<int64_t>, std::unique_ptr<Entry>> cache_;
};

}  // namespace rt::model
