// MatmulEngine: oneDNN matmul primitives keyed by shape, strides, types and post-ops.
#include "model/matmul.h"

#include <cstdlib>
#include <unordered_map>

#include "core/log.h"
#include "model/onednn_isa.h"

namespace rt::model {

using dnnl::memory;

MatOperand RowMajor(int64_t rows, int64_t cols, int64_t ld) { return {{rows, cols}, {ld, 1}}; }
MatOperand Transposed(int64_t rows, int64_t cols, int64_t ld) { return {{rows, cols}, {1, ld}}; }

namespace {
// RINGTRAIN_ISA reaches oneDNN before its first kernel (model/onednn_isa.h).
dnnl::engine CappedCpuEngine() {
  ApplyOnednnIsaCap();
  return dnnl::engine(dnnl::engine::kind::cpu, 0);
}
}  // namespace

MatmulEngine::MatmulEngine() : engine_(CappedCpuEngine()), stream_(engine_) {}

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

}  // namespace

MatmulEngine::Entry& MatmulEngine::Get(MatType in, const MatOperand& ad, const MatOperand& bd,
                                       const MatOperand& cd, bool has_bias, bool accumulate) {
  std::vector<int64_t> key = {static_cast<int64_t>(in), has_bias, accumulate};
  AppendKey(&key, ad);
  AppendKey(&key, bd);
  AppendKey(&key, cd);
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;
  // Sampling with a growing prefix creates shapes per length; keep the cache bounded.
  if (cache_.size() >= kMaxCachedPrimitives) cache_.clear();

  const memory::data_type dt =
      in == MatType::kBf16 ? memory::data_type::bf16 : memory::data_type::f32;
  auto e = std::make_unique<Entry>();
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
  LogDebug("matmul primitive %s", e->impl);
  Entry& ref = *e;
  cache_.emplace(std::move(key), std::move(e));
  return ref;
}

void MatmulEngine::Run(MatType in, const MatOperand& ad, const void* a, const MatOperand& bd,
                       const void* b, const MatOperand& cd, float* c, const float* bias,
                       bool accumulate) {
  Entry& e = Get(in, ad, bd, cd, bias != nullptr, accumulate);
  memory am(e.a, engine_, const_cast<void*>(a));
  memory bm(e.b, engine_, const_cast<void*>(b));
  memory cm(e.c, engine_, c);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS, memory(e.bias, engine_, const_cast<float*>(bias)));
  }
  e.prim.execute(stream_, args);
  stream_.wait();
}

std::string MatmulEngine::ImplName(MatType in, const MatOperand& ad, const MatOperand& bd,
                                   const MatOperand& cd, bool has_bias, bool accumulate) {
  return Get(in, ad, bd, cd, has_bias, accumulate).impl;
}

}  // namespace rt::model
