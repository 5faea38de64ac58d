// The matmuls of causal self-attention, in blocks that skip the masked triangle.
//
// Scores are (B,NH,T,T) but query t only sees keys 0..t. The rows are cut into blocks
// of `block` rows: query block i (rows [i*block, i*block + rows)) needs keys
// [0, i*block + rows) only, so its score rows are computed and read up to that
// extent, never further. The forward pass goes by query block; the backward pass by
// query block for dscores and dQ and by key block for dV and dK (key block j is seen by
// queries [j*block, T) only). With n blocks the attention matmuls do (n+1)/(2n) of the
// full T x T work (5/8 at n = 4).
//
// What each score row holds: the matmuls here write and read columns [0, Extent(t))
// of row t only. The causal softmax (model/kernels.h) still writes whole rows, zeros
// past t: masked entries inside a block must be zero, and writing the rest too is
// faster than stopping at the extent (rows of 4 KB written whole stream better:
// 124M shape, 1 thread, softmax 106 ms per step against 150 ms).
//
// Layouts (llm.c): qkv (B,T,3C) with head h of Q at columns [h*hs, (h+1)*hs), K at
// C + those, V at 2C + those; y and dy (B,T,C); att, datt (B,NH,T,T); dqkv like qkv.
// Matmul operands are `mt` (fp32 or bf16: both inputs the same), outputs fp32.
#pragma once

#include <cstdint>

#include "model/matmul.h"

namespace rt::model {

struct AttentionDims {
  int64_t B, NH, T, hs;  // C = NH * hs
  int64_t block;         // rows per query/key block (AttentionBlock)
  int64_t C() const { return NH * hs; }
  // Columns [0, Extent(t)) of score row t are computed: the end of t's block.
  int64_t Extent(int64_t t) const {
    const int64_t end = (t / block + 1) * block;
    return end < T ? end : T;
  }
};

// Rows per block for sequence length T: T itself below 256 (a short sequence gains
// less than smaller matmuls lose), else about T/4 in multiples of 64, from 128 to 256
// rows. Measured (bf16, this machine): T = 256, 2 threads: 128 rows 42 ms of attention
// matmuls per step, 64 rows 47, whole 48; T = 1024, 1 thread: 128-256 rows 450-480 ms,
// whole 710.
int64_t AttentionBlock(int64_t T);

// Forward. att (B,NH,T,T) = Q @ K^T, by query block, up to each block's extent.
void AttentionScores(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* qkv,
                     float* att);
// y (B,T,C) = att @ V per head; att_mm is the softmax output (fp32 or bf16 as mt).
void AttentionValues(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* att_mm,
                     const void* qkv, float* y);

// Backward. datt (B,NH,T,T) = dy @ V^T, by query block up to each extent.
void AttentionGradScores(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* dy,
                         const void* qkv, float* datt);
// dV (the V columns of dqkv) = att^T @ dy, by key block.
void AttentionGradValues(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* att_mm,
                         const void* dy, float* dqkv);
// dQ = dscores @ K (by query block) and dK = dscores^T @ Q (by key block), into the Q
// and K columns of dqkv; ds_mm holds dL/dscores (the softmax backward's output).
void AttentionGradQueryKey(MatmulEngine& mm, MatType mt, const AttentionDims& d, const void* ds_mm,
                           const void* qkv, float* dqkv);

}  // namespace rt::model
