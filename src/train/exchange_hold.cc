// The test-only pause inside the outer exchange (see exchange_hold.h).
#include "train/exchange_hold.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/log.h"

namespace rt::train {

void HoldInExchangeForTests(int64_t step, bool beside_next_round) {
  static const char* const kPath = std::getenv("RINGTRAIN_TEST_HOLD_EXCHANGE");
  if (kPath == nullptr || kPath[0] == '\0') return;
  const std::string path = kPath;
  if (std::FILE* armed = std::fopen(path.c_str(), "r")) {
    std::fclose(armed);
  } else {
    return;
  }
  // Written aside and renamed: a test that sees PATH.held reads it whole (it read an
  // empty file now and then when PATH.held was written in place).
  const std::string held = path + ".held";
  const std::string part = held + ".part";
  if (std::FILE* f = std::fopen(part.c_str(), "w")) {
    std::fprintf(f, "%lld%s\n", static_cast<long long>(step), beside_next_round ? " beside" : "");
    std::fclose(f);
    std::rename(part.c_str(), held.c_str());
  }
  LogInfo("test hold: inside the outer exchange of step %d while %s exists", step + 1, path);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) break;
    std::fclose(f);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::remove(held.c_str());
}

}  // namespace rt::train
