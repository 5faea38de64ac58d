// MatmulEngine: oneDNN matmul primitives keyed by shape, strides, types and post-ops;
// every oneDNN exception is caught here and kept as a status (see matmul.h).
#include "model/matmul.h"

#include <exception>
#include <limits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "model/onednn_isa.h"

namespace rt::model {

using dnnl::memory;

MatOperand RowMajor(int64_t rows, int64_t cols, int64_t ld) { return {{rows, cols}, {ld, 1}}; }
MatOperand Transposed(int64_t rows, int64_t cols, int64_t ld) { return {{rows, cols}, {1, ld}}; }

bool OneDnnHasNativeBf16() {
  ApplyOnednnIsaCap();  // asking fixes oneDNN's ISA: the cap must be in place first
  // oneDNN's ISA values are bit sets: each one contains the bits of those it extends.
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  const int bf16 = static_cast<int>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

MatmulEngine::MatmulEngine() = default;

namespace {

memory::desc Desc(const MatOperand& op, memory::data_type dt) {
  return memory::desc(memory::dims(op.dims.begin(), op.dims.end()), dt,
                      memory::dims(op.strides.begin(), op.strides.end()));
}

void AppendKey(std::vector<int64_t>* key, const MatOperand& op) {
  key->push_back(static_cast<int64_t>(op.dims.size()));
  key->insert(key->end(), op.dims.begin(), op.dims.end());
  key->insert(key->end(), op.strides.begin(), op.strides.end());
}

// "a bf16 [2,3,5,4] strides [180,4,36,1]".
std::string DescribeOperand(const char* name, const char* type, const MatOperand& op) {
  return absl::StrCat(name, " ", type, " [", absl::StrJoin(op.dims, ","), "] strides [",
                      absl::StrJoin(op.strides, ","), "]");
}

// Sets every element of the view `cd` of c to NaN (strided: only the view's elements).
void FillNaN(const MatOperand& cd, float* c) {
  if (cd.strides.size() != cd.dims.size()) return;  // not a view Get() accepts
  int64_t count = cd.dims.empty() ? 0 : 1;
  for (int64_t d : cd.dims) count *= d > 0 ? d : 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset = 0;
    for (size_t d = cd.dims.size(); d-- > 0;) {
      offset += rest % cd.dims[d] * cd.strides[d];
      rest /= cd.dims[d];
    }
    c[offset] = std::numeric_limits<float>::quiet_NaN();
  }
}

// The message of a caught exception, with oneDNN's status code when it is a dnnl::error.
std::string Cause(const std::exception& e) {
  if (const auto* d = dynamic_cast<const dnnl::error*>(&e)) {
    return absl::StrCat(d->what(), " (dnnl_status ", static_cast<int>(d->status), ")");
  }
  return e.what();
}

}  // namespace

bool MatmulEngine::StartOneDnn() {
  if (started_) return true;
  ApplyOnednnIsaCap();  // RINGTRAIN_ISA reaches oneDNN before its first kernel
  try {
    engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
    stream_ = dnnl::stream(engine_);
    started_ = true;
  } catch (const std::exception& e) {
    if (status_.ok()) {
      status_ = absl::InternalError(absl::StrCat("oneDNN error: cannot create the CPU engine (ISA ",
                                                 OnednnIsaName(), "): ", Cause(e)));
    }
  }
  return started_;
}

void MatmulEngine::Fail(const char* what, MatType in, const MatOperand& ad, const MatOperand& bd,
                        const MatOperand& cd, bool has_bias, bool accumulate,
                        const std::string& cause) {
  if (!status_.ok()) return;
  const char* t = in == MatType::kBf16 ? "bf16" : "f32";
  status_ = absl::InternalError(
      absl::StrCat("oneDNN error: cannot ", what, " the matmul ", DescribeOperand("a", t, ad),
                   " @ ", DescribeOperand("b", t, bd), " -> ", DescribeOperand("c", "f32", cd),
                   has_bias ? " + bias f32" : "", accumulate ? " (accumulating)" : "",
                   " on oneDNN ISA ", OnednnIsaName(), ": ", cause));
  LogDebug("%s", status_.message());
}

MatmulEngine::Entry* MatmulEngine::Get(MatType in, const MatOperand& ad, const MatOperand& bd,
                                       const MatOperand& cd, bool has_bias, bool accumulate) {
  if (!status_.ok() || !StartOneDnn()) return nullptr;
  std::vector<int64_t> key = {static_cast<int64_t>(in), has_bias, accumulate};
  AppendKey(&key, ad);
  AppendKey(&key, bd);
  AppendKey(&key, cd);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.get();
  // Sampling with a growing prefix creates shapes per length; keep the cache bounded.
  if (cache_.size() >= kMaxCachedPrimitives) cache_.clear();
  for (const MatOperand* op : {&ad, &bd, &cd}) {
    if (op->dims.size() < 2 || op->dims.size() > 4 || op->strides.size() != op->dims.size()) {
      Fail("create", in, ad, bd, cd, has_bias, accumulate,
           "operands need 2 to 4 dims and one stride per dim");
      return nullptr;
    }
  }

  const memory::data_type dt =
      in == MatType::kBf16 ? memory::data_type::bf16 : memory::data_type::f32;
  auto e = std::make_unique<Entry>();
  try {
    e->a = Desc(ad, dt);
    e->b = Desc(bd, dt);
    e->c = Desc(cd, memory::data_type::f32);
    if (has_bias) {
      // Bias (N) broadcast over all leading dims.
      memory::dims bdims(cd.dims.size(), 1);
      bdims.back() = cd.dims.back();
      memory::dims bstrides(cd.dims.size(), cd.dims.back());
      bstrides.back() = 1;
      e->bias = memory::desc(bdims, memory::data_type::f32, bstrides);
    }
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    auto op_desc = has_bias ? dnnl::matmul::desc(e->a, e->b, e->bias, e->c)
                            : dnnl::matmul::desc(e->a, e->b, e->c);
    dnnl::matmul::primitive_desc pd(op_desc, attr, engine_);
    e->prim = dnnl::matmul(pd);
    e->impl = pd.impl_info_str();
  } catch (const std::exception& ex) {
    Fail("create", in, ad, bd, cd, has_bias, accumulate, Cause(ex));
    return nullptr;
  }
  LogDebug("matmul primitive %s", e->impl);
  Entry* ref = e.get();
  cache_.emplace(std::move(key), std::move(e));
  return ref;
}

void MatmulEngine::Run(MatType in, const MatOperand& ad, const void* a, const MatOperand& bd,
                       const void* b, const MatOperand& cd, float* c, const float* bias,
                       bool accumulate) {
  Entry* e = Get(in, ad, bd, cd, bias != nullptr, accumulate);
  if (e == nullptr) {
    FillNaN(cd, c);
    return;
  }
  try {
    memory am(e->a, engine_, const_cast<void*>(a));
    memory bm(e->b, engine_, const_cast<void*>(b));
    memory cm(e->c, engine_, c);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS, memory(e->bias, engine_, const_cast<float*>(bias)));
    }
    e->prim.execute(stream_, args);
    stream_.wait();
  } catch (const std::exception& ex) {
    Fail("run", in, ad, bd, cd, bias != nullptr, accumulate, Cause(ex));
    FillNaN(cd, c);
  }
}

std::string MatmulEngine::ImplName(MatType in, const MatOperand& ad, const MatOperand& bd,
                                   const MatOperand& cd, bool has_bias, bool accumulate) {
  const Entry* e = Get(in, ad, bd, cd, has_bias, accumulate);
  return e == nullptr ? "" : e->impl;
}

}  // namespace rt::model
