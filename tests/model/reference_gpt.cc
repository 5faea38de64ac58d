// Naive double-precision GPT-2 and llama forward (see reference_gpt.h). Written for
// clarity only.
#include "model/reference_gpt.h"

#include <cmath>

namespace rt::model::testing {
namespace {

using Vec = std::vector<double>;

void LayerNorm(Vec& out, const Vec& x, const double* w, const double* b, int rows, int C) {
  out.assign(x.size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < C; ++i) m += x[r * C + i];
    m /= C;
    for (int i = 0; i < C; ++i) v += (x[r * C + i] - m) * (x[r * C + i] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int i = 0; i < C; ++i) out[r * C + i] = (x[r * C + i] - m) * s * w[i] + b[i];
  }
}

void RmsNorm(Vec& out, const Vec& x, const double* w, int rows, int C) {
  out.assign(x.size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += x[r * C + i] * x[r * C + i];
    const double s = 1.0 / std::sqrt(ss / C + 1e-5);
    for (int i = 0; i < C; ++i) out[r * C + i] = x[r * C + i] * s * w[i];
  }
}

// Rotary embeddings on the q and k heads of qkv (rows of 3C), written from the formula
// in Hugging Face's form: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
void Rope(Vec& qkv, int B, int T, int NH, int hs, double theta) {
  const int C = NH * hs, half = hs / 2;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < 2 * NH; ++h) {
        double* x = &qkv[(b * T + t) * 3 * C + h * hs];
        std::vector<double> rot(hs);
        for (int i = 0; i < hs; ++i) rot[i] = i < half ? -x[i + half] : x[i - half];
        for (int i = 0; i < hs; ++i) {
          const double angle = t * std::pow(theta, -2.0 * (i % half) / hs);
          x[i] = x[i] * std::cos(angle) + rot[i] * std::sin(angle);
        }
      }
    }
  }
}

// out (rows,N) = x (rows,K) @ w (N,K)^T + b
void Linear(Vec& out, const Vec& x, const double* w, const double* b, int rows, int K, int N) {
  out.assign(static_cast<size_t>(rows) * N, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int n = 0; n < N; ++n) {
      double acc = b != nullptr ? b[n] : 0.0;
      for (int k = 0; k < K; ++k) acc += x[r * K + k] * w[n * K + k];
      out[r * N + n] = acc;
    }
  }
}

}  // namespace

double ReferenceLoss(const GptConfig& cfg, const ParamLayout& layout, const Vec& params,
                     const int32_t* tokens, const int32_t* targets, int B, int T, Vec* logits_out) {
  const int C = cfg.dim, V = cfg.vocab_size, NH = cfg.n_heads, hs = C / NH;
  const int M = B * T;
  const bool llama = cfg.arch == Arch::kLlama;
  const int H = cfg.Hidden();
  const double* P = params.data();
  Vec x(static_cast<size_t>(M) * C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < C; ++i) {
        x[(b * T + t) * C + i] = P[layout.wte() + tokens[b * T + t] * C + i] +
                                 (llama ? 0.0 : P[layout.wpe() + t * C + i]);
      }
    }
  }
  const BlockOffsets& o = layout.block();
  Vec ln, qkv, y, proj, h, h2;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const double* p = P + layout.block_begin(l);
    if (llama) {
      RmsNorm(ln, x, p + o.ln1_w, M, C);
      Linear(qkv, ln, p + o.qkv_w, nullptr, M, C, 3 * C);
      Rope(qkv, B, T, NH, hs, cfg.rope_theta);
    } else {
      LayerNorm(ln, x, p + o.ln1_w, p + o.ln1_b, M, C);
      Linear(qkv, ln, p + o.qkv_w, p + o.qkv_b, M, C, 3 * C);
    }
    y.assign(static_cast<size_t>(M) * C, 0.0);
    for (int b = 0; b < B; ++b) {
      for (int hh = 0; hh < NH; ++hh) {
        for (int t = 0; t < T; ++t) {
          const double* q = &qkv[(b * T + t) * 3 * C + hh * hs];
          std::vector<double> s(t + 1);
          double mx = -1e300;
          for (int j = 0; j <= t; ++j) {
            const double* k = &qkv[(b * T + j) * 3 * C + C + hh * hs];
            double d = 0;
            for (int i = 0; i < hs; ++i) d += q[i] * k[i];
            s[j] = d / std::sqrt(static_cast<double>(hs));
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
          for (int j = 0; j <= t; ++j) {
            const double* v = &qkv[(b * T + j) * 3 * C + 2 * C + hh * hs];
            for (int i = 0; i < hs; ++i) y[(b * T + t) * C + hh * hs + i] += s[j] / sum * v[i];
          }
        }
      }
    }
    Linear(proj, y, p + o.attproj_w, llama ? nullptr : p + o.attproj_b, M, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    if (llama) {
      RmsNorm(ln, x, p + o.ln2_w, M, C);
      Linear(h, ln, p + o.fc_w, nullptr, M, C, 2 * H);  // (M,2H): gate | up
      h2.assign(static_cast<size_t>(M) * H, 0.0);
      for (int r = 0; r < M; ++r) {
        for (int j = 0; j < H; ++j) {
          const double g = h[r * 2 * H + j], u = h[r * 2 * H + H + j];
          h2[r * H + j] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      Linear(proj, h2, p + o.fcproj_w, nullptr, M, H, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
      continue;
    }
    LayerNorm(ln, x, p + o.ln2_w, p + o.ln2_b, M, C);
    Linear(h, ln, p + o.fc_w, p + o.fc_b, M, C, 4 * C);
    for (double& v : h) {
      v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    Linear(proj, h, p + o.fcproj_w, p + o.fcproj_b, M, 4 * C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
  if (llama) {
    RmsNorm(ln, x, P + layout.lnf_w(), M, C);
  } else {
    LayerNorm(ln, x, P + layout.lnf_w(), P + layout.lnf_b(), M, C);
  }
  Vec logits;
  Linear(logits, ln, P + layout.lm_head(), nullptr, M, C, V);
  double loss = 0;
  for (int r = 0; r < M; ++r) {
    double mx = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[r * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[r * V + v] - mx);
    loss += std::log(sum) + mx - logits[r * V + targets[r]];
  }
  if (logits_out != nullptr) *logits_out = std::move(logits);
  return loss;
}

}  // namespace rt::model::testing
