// Per-layer checks of our own kernels: each backward against central differences of
// its forward, each forward against plain double loops; the oneDNN matmul wrapper
// (transposes, strided heads, accumulation, bf16) against naive matmul; bulk bf16.
//
// Tolerance: the kernels are float; the objective J = sum(r * out) is accumulated in
// double and inputs are perturbed by h = 1e-3, so the central difference carries a
// truncation error O(h^2) ~ 1e-6 and a rounding error ~ 1e-7 * |J| / h ~ 1e-4. We allow
// 2e-3 absolute plus 1e-2 relative.
#include "model/kernels.h"

#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bf16_paths.h"
#include "core/bf16.h"
#include "core/bf16_convert.h"
#include "isa_paths.h"
#include "model/matmul.h"
#include "random_vector.h"

namespace rt::model {
namespace {
using rt::testing::GaussianVector;

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks analytic gradient `grad` of J(x) at x by central differences of `J`.
void CheckGradient(std::vector<float>& x, const std::vector<float>& grad,
                   const std::function<double()>& J, const char* what) {
  const float h = 1e-3f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = J();
    x[i] = keep - h;
    const double down = J();
    x[i] = keep;
    const double fd = (up - down) / (2.0 * h);
    INFO(what, " index ", i, " fd ", fd, " analytic ", grad[i]);
    CHECK(std::abs(fd - grad[i]) <= 2e-3 + 1e-2 * std::abs(fd));
  }
}

TEST_CASE("layernorm forward matches double loops and backward matches finite differences") {
  RT_EVERY_KERNEL_PATH();
  const int64_t N = 5, C = 37;  // C not a multiple of 16: exercises tails
  std::vector<float> x = GaussianVector(N * C, 1), w = GaussianVector(C, 2),
                     b = GaussianVector(C, 3), r = GaussianVector(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto J = [&] {
    LayerNormForward(out.data(), nullptr, mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                     C);
    return Dot(out, r);
  };
  J();
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += x[n * C + i];
    m /= C;
    for (int64_t i = 0; i < C; ++i) v += (x[n * C + i] - m) * (x[n * C + i] - m);
    const double s = 1.0 / std::sqrt(v / C + 1e-5);
    for (int64_t i = 0; i < C; ++i) {
      CHECK(out[n * C + i] == doctest::Approx((x[n * C + i] - m) * s * w[i] + b[i]).epsilon(1e-5));
    }
  }
  // bf16 output is the rounded fp32 output.
  std::vector<bf16_t> out_h(N * C);
  LayerNormForward(nullptr, out_h.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                   C);
  for (int64_t i = 0; i < N * C; ++i) CHECK(out_h[i] == FloatToBf16(out[i]));

  std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f), db(C, -1.0f);  // backward accumulates
  LayerNormBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                    rstd.data(), N, C);
  for (float& v : dx) v -= 0.5f;
  for (float& v : dw) v -= 0.25f;
  for (float& v : db) v += 1.0f;
  CheckGradient(x, dx, J, "dx");
  CheckGradient(w, dw, J, "dw");
  CheckGradient(b, db, J, "db");

  // Over several blocks of rows and a partial one: dw and db against double sums, and
  // the same bits on 1 thread and on 2 (peers with different core counts stay replicas).
  const int64_t N2 = 101;
  const std::vector<float> x2 = GaussianVector(N2 * C, 15), g2 = GaussianVector(N2 * C, 16);
  std::vector<float> mean2(N2), rstd2(N2), out2(N2 * C);
  LayerNormForward(out2.data(), nullptr, mean2.data(), rstd2.data(), x2.data(), w.data(), b.data(),
                   N2, C);
  struct Grads {
    std::vector<float> dx, dw, db;
  };
  auto backward = [&](int threads) {
    Grads o{std::vector<float>(N2 * C, 0.0f), std::vector<float>(C, 0.0f),
            std::vector<float>(C, 0.0f)};
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    LayerNormBackward(o.dx.data(), o.dw.data(), o.db.data(), g2.data(), x2.data(), w.data(),
                      mean2.data(), rstd2.data(), N2, C);
    omp_set_num_threads(saved);
    return o;
  };
  const Grads one = backward(1), two = backward(2);
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N2; ++n) {
      sw += double{g2[n * C + c]} * (double{x2[n * C + c]} - mean2[n]) * rstd2[n];
      sb += g2[n * C + c];
    }
    CHECK(one.dw[c] == doctest::Approx(sw).epsilon(1e-4).scale(1e-4));
    CHECK(one.db[c] == doctest::Approx(sb).epsilon(1e-4).scale(1e-4));
  }
  CHECK(std::memcmp(one.dx.data(), two.dx.data(), one.dx.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.dw.data(), two.dw.data(), C * sizeof(float)) == 0);
  CHECK(std::memcmp(one.db.data(), two.db.data(), C * sizeof(float)) == 0);
}

TEST_CASE("gelu forward matches tanh formula and backward matches finite differences") {
  RT_EVERY_KERNEL_PATH();
  const int64_t n = 4103;
  std::vector<float> x = GaussianVector(n, 5, 2.0f), r = GaussianVector(n, 6), out(n);
  x[0] = 30.0f;  // saturated ends must not produce NaN
  x[1] = -30.0f;
  auto J = [&] {
    GeluForward(out.data(), nullptr, x.data(), n);
    return Dot(out, r);
  };
  J();
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    CHECK(out[i] == doctest::Approx(want).epsilon(1e-5).scale(1e-6));
  }
  std::vector<float> d = r;
  GeluBackward(d.data(), x.data(), n);
  x.resize(300);  // finite differences on a prefix keep the test fast
  d.resize(300);
  r.resize(300);
  out.resize(300);
  std::function<double()> Jp = [&] {
    GeluForward(out.data(), nullptr, x.data(), 300);
    return Dot(out, r);
  };
  CheckGradient(x, d, Jp, "gelu");
}

TEST_CASE("causal softmax forward masks the future and backward matches finite differences") {
  RT_EVERY_KERNEL_PATH();
  const int64_t BH = 3, T = 19;
  const float scale = 0.7f;
  std::vector<float> s = GaussianVector(BH * T * T, 7, 2.0f), r = GaussianVector(BH * T * T, 8);
  std::vector<float> att(BH * T * T);
  auto J = [&] {
    att = s;
    CausalSoftmaxForward(att.data(), nullptr, BH, T, scale);
    return Dot(att, r);
  };
  J();
  for (int64_t row = 0; row < BH * T; ++row) {
    const int64_t t = row % T;
    double mx = -1e30, sum = 0;
    for (int64_t j = 0; j <= t; ++j) mx = std::max(mx, static_cast<double>(s[row * T + j]) * scale);
    for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[row * T + j] * scale - mx);
    for (int64_t j = 0; j < T; ++j) {
      const double want = j <= t ? std::exp(s[row * T + j] * scale - mx) / sum : 0.0;
      CHECK(att[row * T + j] == doctest::Approx(want).epsilon(1e-5).scale(1e-7));
    }
  }
  std::vector<float> d = r;
  std::vector<bf16_t> d_h(BH * T * T);
  CausalSoftmaxBackward(d.data(), d_h.data(), att.data(), BH, T, scale);
  for (size_t i = 0; i < d.size(); ++i) CHECK(d_h[i] == FloatToBf16(d[i]));
  CheckGradient(s, d, J, "softmax");
}

TEST_CASE("fused softmax cross-entropy: loss and gradient against double and finite differences") {
  RT_EVERY_KERNEL_PATH();
  const int64_t R = 4, V = 53;
  std::vector<float> logits = GaussianVector(R * V, 9, 3.0f);
  std::vector<int32_t> targets = {0, 52, 17, 17};
  const float gs = 0.37f;
  double want = 0;
  for (int64_t r = 0; r < R; ++r) {
    double mx = -1e30, sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(logits[r * V + v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[r * V + v] - mx);
    want += std::log(sum) + mx - logits[r * V + targets[r]];
  }
  std::vector<float> fwd = logits;
  CHECK(SoftmaxCrossEntropy(fwd.data(), nullptr, targets.data(), R, V, false, gs) ==
        doctest::Approx(want).epsilon(1e-6));
  CHECK(fwd == logits);  // forward only leaves logits untouched
  std::vector<float> grad = logits;
  std::vector<bf16_t> grad_h(R * V);
  CHECK(SoftmaxCrossEntropy(grad.data(), grad_h.data(), targets.data(), R, V, true, gs) ==
        doctest::Approx(want).epsilon(1e-6));
  for (size_t i = 0; i < grad.size(); ++i) CHECK(grad_h[i] == FloatToBf16(grad[i]));
  auto J = [&] {
    std::vector<float> tmp = logits;
    return gs * SoftmaxCrossEntropy(tmp.data(), nullptr, targets.data(), R, V, false, 0.0f);
  };
  CheckGradient(logits, grad, J, "xent");
  // Large logits do not overflow.
  std::vector<float> big(V, 1000.0f);
  big[3] = 1010.0f;
  int32_t t3 = 3;
  CHECK(SoftmaxCrossEntropy(big.data(), nullptr, &t3, 1, V, true, 1.0f) ==
        doctest::Approx(std::log(1.0 + (V - 1) * std::exp(-10.0))).epsilon(1e-4));
  for (float g : big) CHECK(std::isfinite(g));
}

TEST_CASE("embedding forward gathers and backward scatters, repeated tokens add up") {
  RT_EVERY_KERNEL_PATH();
  const int64_t B = 2, T = 3, C = 20, V = 5;
  std::vector<float> wte = GaussianVector(V * C, 10), wpe = GaussianVector(T * C, 11), x(B * T * C);
  std::vector<int32_t> tok = {4, 1, 4, 0, 4, 2};
  EmbeddingForward(x.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t i = 0; i < C; ++i) {
      CHECK(x[bt * C + i] == wte[tok[bt] * C + i] + wpe[(bt % T) * C + i]);
    }
  }
  std::vector<float> dx = GaussianVector(B * T * C, 12), dwte(V * C, 0.0f), dwpe(T * C, 1.0f);
  EmbeddingBackward(dwte.data(), dwpe.data(), dx.data(), tok.data(), B, T, C);
  for (int64_t i = 0; i < C; ++i) {
    CHECK(dwte[4 * C + i] == doctest::Approx(dx[0 * C + i] + dx[2 * C + i] + dx[4 * C + i]));
    CHECK(dwte[3 * C + i] == 0.0f);
    CHECK(dwpe[1 * C + i] == doctest::Approx(1.0f + dx[1 * C + i] + dx[4 * C + i]));
  }
}

TEST_CASE("bias backward sums rows and accumulates") {
  RT_EVERY_KERNEL_PATH();
  const int64_t M = 33, N = 70;
  std::vector<float> d = GaussianVector(M * N, 13), db(N, 2.0f);
  std::vector<bf16_t> d_h(M * N);
  BiasBackward(db.data(), d.data(), M, N, d_h.data());
  for (int64_t i = 0; i < M * N; ++i) CHECK(d_h[i] == FloatToBf16(d[i]));
  for (int64_t n = 0; n < N; ++n) {
    double s = 2.0;
    for (int64_t m = 0; m < M; ++m) s += d[m * N + n];
    CHECK(db[n] == doctest::Approx(s).epsilon(1e-5));
  }
  // The same bits on 1 thread and on 2 (peers with different core counts stay replicas),
  // over several row blocks and a partial one.
  const int64_t M2 = 101;
  const std::vector<float> d2 = GaussianVector(M2 * N, 14);
  std::vector<float> one(N, 0.5f), two(N, 0.5f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  BiasBackward(one.data(), d2.data(), M2, N);
  omp_set_num_threads(2);
  BiasBackward(two.data(), d2.data(), M2, N);
  omp_set_num_threads(saved);
  CHECK(std::memcmp(one.data(), two.data(), N * sizeof(float)) == 0);
}

TEST_CASE("bulk bf16 conversion equals the scalar rounding, NaN stays NaN") {
  RT_EVERY_KERNEL_PATH();
  std::vector<float> x = GaussianVector(1000, 14, 100.0f);
  x[5] = std::nanf("");
  x[6] = INFINITY;
  x[7] = -0.0f;
  x[8] = 1.0f + 1.0f / 256.0f;  // a tie: rounds to even
  std::vector<bf16_t> h(x.size());
  FloatToBf16N(x.data(), h.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 5) {
      CHECK(std::isnan(Bf16ToFloat(h[i])));
    } else {
      CHECK(h[i] == FloatToBf16(x[i]));
    }
  }
  std::vector<float> back(x.size());
  Bf16ToFloatN(h.data(), back.data(), h.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (i != 5) CHECK(back[i] == Bf16ToFloat(h[i]));
  }
}

// Naive c (M,N) = a @ b over element accessors.
void NaiveMatmul(int64_t M, int64_t K, int64_t N, const std::function<double(int64_t, int64_t)>& a,
                 const std::function<double(int64_t, int64_t)>& b, std::vector<double>& c) {
  c.assign(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) c[m * N + n] += a(m, k) * b(k, n);
    }
  }
}

TEST_CASE("matmul engine: transposes, bias, accumulation and bf16 match naive matmul") {
  MatmulEngine mm;
  const int64_t M = 37, K = 29, N = 45;
  std::vector<float> a = GaussianVector(M * K, 15), w = GaussianVector(N * K, 16),
                     bias = GaussianVector(N, 17);
  std::vector<double> want;
  // out = a @ w^T + bias, then accumulate once more.
  NaiveMatmul(
      M, K, N, [&](int64_t m, int64_t k) { return a[m * K + k]; },
      [&](int64_t k, int64_t n) { return w[n * K + k]; }, want);
  std::vector<float> c(M * N, 0.0f);
  mm.Run(MatType::kF32, RowMajor(M, K, K), a.data(), Transposed(K, N, K), w.data(),
         RowMajor(M, N, N), c.data(), bias.data(), false);
  mm.Run(MatType::kF32, RowMajor(M, K, K), a.data(), Transposed(K, N, K), w.data(),
         RowMajor(M, N, N), c.data(), nullptr, true);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      CHECK(c[m * N + n] == doctest::Approx(2 * want[m * N + n] + bias[n]).epsilon(1e-4));
    }
  }
  CHECK(mm.cached_primitives() == 2);
  // Transposed A (weight gradient form) in bf16: compare with the bf16-rounded inputs.
  std::vector<bf16_t> ah(M * K), wh(N * K);
  FloatToBf16N(a.data(), ah.data(), ah.size());
  FloatToBf16N(w.data(), wh.data(), wh.size());
  // c2 (K,K) = a^T @ a with a^T read through strides.
  std::vector<float> c2(K * K);
  mm.Run(MatType::kBf16, Transposed(K, M, K), ah.data(), RowMajor(M, K, K), ah.data(),
         RowMajor(K, K, K), c2.data(), nullptr, false);
  if (!::rt::testing::Bf16MatmulsRun()) {
    // No bf16 matmul in this oneDNN ISA (AVX2 and below): the promise is a status naming
    // the operation and the ISA, and NaN in the output, never numbers.
    MESSAGE("bf16 is not available on oneDNN ISA ", OnednnIsaName(), ": checked the refusal");
    const std::string m(mm.status().message());
    CHECK_FALSE(mm.status().ok());
    CHECK(m.find("cannot create the matmul a bf16") != std::string::npos);
    CHECK(m.find("on oneDNN ISA " + OnednnIsaName()) != std::string::npos);
    for (float x : c2) CHECK(std::isnan(x));
    return;
  }
  CHECK(mm.status().ok());
  NaiveMatmul(
      K, M, K, [&](int64_t i, int64_t m) { return Bf16ToFloat(ah[m * K + i]); },
      [&](int64_t m, int64_t j) { return Bf16ToFloat(ah[m * K + j]); }, want);
  for (int64_t i = 0; i < K * K; ++i) CHECK(c2[i] == doctest::Approx(want[i]).epsilon(1e-4));
}

TEST_CASE("batched attention matmuls read heads through strides") {
  MatmulEngine mm;
  const int64_t B = 2, NH = 3, T = 5, hs = 4, C = NH * hs;
  std::vector<float> qkv = GaussianVector(B * T * 3 * C, 18), att(B * NH * T * T);
  const MatOperand q_view{{B, NH, T, hs}, {T * 3 * C, hs, 3 * C, 1}};
  const MatOperand kt_view{{B, NH, hs, T}, {T * 3 * C, hs, 1, 3 * C}};
  const MatOperand att_view{{B, NH, T, T}, {NH * T * T, T * T, T, 1}};
  mm.Run(MatType::kF32, q_view, qkv.data(), kt_view, qkv.data() + C, att_view, att.data(), nullptr,
         false);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hs; ++d) {
            s += static_cast<double>(qkv[(b * T + i) * 3 * C + h * hs + d]) *
                 qkv[(b * T + j) * 3 * C + C + h * hs + d];
          }
          CHECK(att[((b * NH + h) * T + i) * T + j] == doctest::Approx(s).epsilon(1e-5));
        }
      }
    }
  }
}

}  // namespace
}  // namespace rt::model
