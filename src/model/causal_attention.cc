// Causal attention matmuls by blocks (see causal_attention.h). Every operand is a
// strided view into qkv, y, att or dqkv: no copies. Each block is one batched matmul
// over (B, NH).
#include "model/causal_attention.h"

#include <algorithm>

namespace rt::model {
namespace {

// Views, batched over (B, NH). `rows` rows starting wherever the pointer points.
// Head rows of qkv (Q, K or V): (rows, hs), row stride 3C.
MatOperand QkvHeads(const AttentionDims& d, int64_t rows) {
  return {{d.B, d.NH, rows, d.hs}, {d.T * 3 * d.C(), d.hs, 3 * d.C(), 1}};
}
// The transpose of `cols` head rows of qkv, seen as (hs, cols).
MatOperand QkvHeadsT(const AttentionDims& d, int64_t cols) {
  return {{d.B, d.NH, d.hs, cols}, {d.T * 3 * d.C(), d.hs, 1, 3 * d.C()}};
}
// Head rows of y or dy (B,T,C): (rows, hs), row stride C.
MatOperand YHeads(const AttentionDims& d, int64_t rows) {
  return {{d.B, d.NH, rows, d.hs}, {d.T * d.C(), d.hs, d.C(), 1}};
}
// A (rows, cols) window of the score matrix, row stride T.
MatOperand Scores(const AttentionDims& d, int64_t rows, int64_t cols) {
  return {{d.B, d.NH, rows, cols}, {d.NH * d.T * d.T, d.T * d.T, d.T, 1}};
}
// The transpose of a (cols, rows) window of the score matrix, seen as (rows, cols).
MatOperand ScoresT(const AttentionDims& d, int64_t rows, int64_t cols) {
  return {{d.B, d.NH, rows, cols}, {d.NH * d.T * d.T, d.T * d.T, 1, d.T}};
}

// Calls f(first row, rows) for each block of [0, T).
template <typename F>
void ForBlocks(const AttentionDims& d, F f) {
  for (int64_t r0 = 0; r0 < d.T; r0 += d.block) f(r0, std::min(d.block, d.T - r0));
}

}  // namespace

int64_t AttentionBlock(int64_t T) {
  if (T < 256) return std::max<int64_t>(T, 1);
  return std::clamp<int64_t>((T / 4 + 63) / 64 * 64, 128, 256);
}

void AttentionScores(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* qkv,
                     float* att) {
  const int64_t C = d.C();
  ForBlocks(d, [&](int64_t r0, int64_t rows) {
    const int64_t keys = r0 + rows;  // scores (rows, keys) = Q rows @ K[0, keys)^T
    mm.Run(mt, QkvHeads(d, rows), OperandAt(qkv, mt, r0 * 3 * C), QkvHeadsT(d, keys),
           OperandAt(qkv, mt, C), Scores(d, rows, keys), att + r0 * d.T, nullptr, false);
  });
}

void AttentionValues(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* att_mm,
                     const void* qkv, float* y) {
  const int64_t C = d.C();
  ForBlocks(d, [&](int64_t r0, int64_t rows) {
    const int64_t keys = r0 + rows;  // y rows (rows, hs) = att (rows, keys) @ V[0, keys)
    mm.Run(mt, Scores(d, rows, keys), OperandAt(att_mm, mt, r0 * d.T), QkvHeads(d, keys),
           OperandAt(qkv, mt, 2 * C), YHeads(d, rows), y + r0 * C, nullptr, false);
  });
}

void AttentionGradScores(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* dy,
                         const void* qkv, float* datt) {
  const int64_t C = d.C();
  ForBlocks(d, [&](int64_t r0, int64_t rows) {
    const int64_t keys = r0 + rows;  // datt (rows, keys) = dy rows @ V[0, keys)^T
    mm.Run(mt, YHeads(d, rows), OperandAt(dy, mt, r0 * C), QkvHeadsT(d, keys),
           OperandAt(qkv, mt, 2 * C), Scores(d, rows, keys), datt + r0 * d.T, nullptr, false);
  });
}

void AttentionGradValues(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* att_mm,
                         const void* dy, float* dqkv) {
  const int64_t C = d.C();
  ForBlocks(d, [&](int64_t k0, int64_t keys) {
    const int64_t queries = d.T - k0;  // dV (keys, hs) = att[k0.., k0..+keys)^T @ dy[k0..]
    mm.Run(mt, ScoresT(d, keys, queries), OperandAt(att_mm, mt, k0 * d.T + k0), YHeads(d, queries),
           OperandAt(dy, mt, k0 * C), QkvHeads(d, keys), dqkv + 2 * C + k0 * 3 * C, nullptr, false);
  });
}

void AttentionGradQueryKey(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* ds_mm,
                           const void* qkv, float* dqkv) {
  const int64_t C = d.C();
  ForBlocks(d, [&](int64_t r0, int64_t rows) {
    const int64_t keys = r0 + rows;  // dQ rows (rows, hs) = ds (rows, keys) @ K[0, keys)
    mm.Run(mt, Scores(d, rows, keys), OperandAt(ds_mm, mt, r0 * d.T), QkvHeads(d, keys),
           OperandAt(qkv, mt, C), QkvHeads(d, rows), dqkv + r0 * 3 * C, nullptr, false);
  });
  ForBlocks(d, [&](int64_t k0, int64_t keys) {
    const int64_t queries = d.T - k0;  // dK (keys, hs) = ds[k0.., k0..+keys)^T @ Q[k0..]
    mm.Run(mt, ScoresT(d, keys, queries), OperandAt(ds_mm, mt, k0 * d.T + k0), QkvHeads(d, queries),
           OperandAt(qkv, mt, k0 * 3 * C), QkvHeads(d, keys), dqkv + C + k0 * 3 * C, nullptr,
           false);
  });
}

}  // namespace rt::model
