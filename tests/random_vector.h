// Test helper shared by every test executable: a reproducible vector of normally
// distributed floats (mt19937 seeded with `seed`, mean 0, standard deviation `scale`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace rt::testing {

inline std::vector<float> GaussianVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (float& f : x) f = dist(rng);
  return x;
}

}  // namespace rt::testing
