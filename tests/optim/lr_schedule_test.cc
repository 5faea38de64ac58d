// CosineLr: warm-up ramp, peak, midpoint, floor, and no warm-up.
#include "optim/lr_schedule.h"

#include <doctest/doctest.h>

using rt::optim::CosineLr;

TEST_CASE("CosineLr warms up linearly to the peak") {
  CHECK(CosineLr(0, 10, 100, 1.0f, 0.1f) == doctest::Approx(0.1f));
  CHECK(CosineLr(4, 10, 100, 1.0f, 0.1f) == doctest::Approx(0.5f));
  CHECK(CosineLr(9, 10, 100, 1.0f, 0.1f) == doctest::Approx(1.0f));
  CHECK(CosineLr(10, 10, 100, 1.0f, 0.1f) == doctest::Approx(1.0f));  // cosine starts at peak
}

TEST_CASE("CosineLr decays by a cosine to min_lr and stays there") {
  // Midpoint of the decay: (max + min) / 2.
  CHECK(CosineLr(55, 10, 100, 1.0f, 0.1f) == doctest::Approx(0.55f));
  CHECK(CosineLr(99, 10, 100, 1.0f, 0.1f) == doctest::Approx(0.1f).epsilon(0.01));
  CHECK(CosineLr(100, 10, 100, 1.0f, 0.1f) == doctest::Approx(0.1f));
  CHECK(CosineLr(1000, 10, 100, 1.0f, 0.1f) == doctest::Approx(0.1f));
  // Monotone non-increasing after the warm-up.
  float prev = 2.0f;
  for (int s = 10; s < 120; ++s) {
    float lr = CosineLr(s, 10, 100, 1.0f, 0.1f);
    CHECK(lr <= prev);
    prev = lr;
  }
}

TEST_CASE("CosineLr without warm-up starts at the peak") {
  CHECK(CosineLr(0, 0, 10, 3e-4f, 3e-5f) == doctest::Approx(3e-4f));
  CHECK(CosineLr(5, 0, 10, 3e-4f, 3e-5f) == doctest::Approx(1.65e-4f));
}
