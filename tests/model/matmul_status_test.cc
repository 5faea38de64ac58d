// oneDNN failures are statuses, never exceptions: a matmul oneDNN cannot
// create names the operation, the shape and oneDNN's ISA, leaves NaN, and stays failed;
// under an AVX2 cap (no bf16 matmul in oneDNN 2.6) bf16 is reported unavailable and a
// bf16 model fails in Create() while fp32 still runs.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/matmul.h"
#include "model/matmul_speed.h"
#include "model/onednn_isa.h"

namespace rt::model {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("a matmul oneDNN cannot create is a status naming the operation and shape and ISA") {
  MatmulEngine mm;
  // Inner dimensions disagree (3 against 5): no oneDNN can create this.
  std::vector<float> a(4 * 3, 1.0f), b(5 * 6, 1.0f), c(4 * 6, 0.0f);
  mm.Run(MatType::kF32, RowMajor(4, 3, 3), a.data(), RowMajor(5, 6, 6), b.data(), RowMajor(4, 6, 6),
         c.data(), nullptr, false);
  REQUIRE_FALSE(mm.status().ok());
  const std::string first(mm.status().message());
  CHECK(Contains(first, "oneDNN error: cannot create the matmul"));
  CHECK(Contains(first, "a f32 [4,3] strides [3,1]"));
  CHECK(Contains(first, "b f32 [5,6] strides [6,1]"));
  CHECK(Contains(first, "c f32 [4,6] strides [6,1]"));
  CHECK(Contains(first, "on oneDNN ISA " + OnednnIsaName() + ": "));
  for (float x : c) CHECK(std::isnan(x));
  CHECK(mm.ImplName(MatType::kF32, RowMajor(4, 3, 3), RowMajor(5, 6, 6), RowMajor(4, 6, 6), false,
                    false)
            .empty());

  // Sticky: a valid matmul afterwards is not run (NaN), and the first failure is kept.
  std::vector<float> b2(3 * 6, 1.0f);
  c.assign(c.size(), 0.0f);
  mm.Run(MatType::kF32, RowMajor(4, 3, 3), a.data(), RowMajor(3, 6, 6), b2.data(),
         RowMajor(4, 6, 6), c.data(), nullptr, false);
  for (float x : c) CHECK(std::isnan(x));
  CHECK(std::string(mm.status().message()) == first);

  // A fresh engine runs that valid matmul; a strided output view gets NaN only in its
  // own elements after a failure (columns 0..5 of rows of 8).
  MatmulEngine ok;
  ok.Run(MatType::kF32, RowMajor(4, 3, 3), a.data(), RowMajor(3, 6, 6), b2.data(),
         RowMajor(4, 6, 6), c.data(), nullptr, false);
  CHECK(ok.status().ok());
  CHECK(c[0] == doctest::Approx(3.0));
  MatmulEngine bad;
  std::vector<float> wide(4 * 8, 7.0f);
  bad.Run(MatType::kF32, RowMajor(4, 3, 3), a.data(), RowMajor(5, 6, 6), b.data(),
          RowMajor(4, 6, 8), wide.data(), nullptr, false);
  CHECK(std::isnan(wide[5]));
  CHECK(wide[6] == 7.0f);
  CHECK(wide[7] == 7.0f);
}

TEST_CASE("operands without 2 to 4 dims and one stride per dim are refused") {
  MatmulEngine mm;
  std::vector<float> x(16, 1.0f);
  mm.Run(MatType::kF32, MatOperand{{4, 4}, {4}}, x.data(), RowMajor(4, 4, 4), x.data(),
         RowMajor(4, 4, 4), x.data(), nullptr, false);
  REQUIRE_FALSE(mm.status().ok());
  CHECK(Contains(std::string(mm.status().message()), "one stride per dim"));
}

// The checks of the next test, run in a child process whose oneDNN is capped at AVX2
// (the cap must be in place before oneDNN's first primitive, so not in this process).
void CheckUnderAvx2Cap() {
  CHECK(OnednnIsaName() == "avx2");
  CHECK_FALSE(OneDnnHasNativeBf16());
  CHECK(GetBf16Support() == Bf16Support::kUnavailable);
  absl::StatusOr<MatmulSpeed> bf16 = MeasureMatmul(MatType::kBf16, 64, 1);
  REQUIRE_FALSE(bf16.ok());
  const std::string m(bf16.status().message());
  CHECK(Contains(m, "cannot create the matmul a bf16 [64,64] strides [64,1]"));
  CHECK(Contains(m, "on oneDNN ISA avx2"));
  CHECK(MeasureMatmul(MatType::kF32, 64, 1).ok());

  const GptConfig tiny{64, 1, 2, 16, 8};  // vocab, layers, heads, dim, seq_len
  auto g16 = Gpt::Create(tiny, GptOptions{Precision::kBf16, false, 1});
  REQUIRE_FALSE(g16.ok());
  CHECK(g16.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(std::string(g16.status().message()),
                 "precision bf16 is not available on this CPU (oneDNN ISA avx2 has no bf16 "
                 "matmul); use fp32"));
  auto g32 = Gpt::Create(tiny, GptOptions{Precision::kFp32, false, 1});
  REQUIRE(g32.ok());
  CHECK((*g32)->status().ok());
  CHECK(*ParsePrecision("auto") == Precision::kFp32);
}

TEST_CASE("under an AVX2 cap bf16 is unavailable -- an error naming the ISA -- and fp32 runs") {
  if (std::getenv("RT_TEST_AVX2_CHILD") != nullptr) {
    CheckUnderAvx2Cap();
    return;
  }
  // Re-run this test case alone in a child with oneDNN capped at AVX2.
  char self[PATH_MAX] = {};
  REQUIRE(readlink("/proc/self/exe", self, sizeof(self) - 1) > 0);
  const std::string out_path = "/tmp/rt_matmul_avx2_child." + std::to_string(getpid());
  pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    setenv("RT_TEST_AVX2_CHILD", "1", 1);
    execl(self, self, "--test-case=under an AVX2 cap bf16 is unavailable*", "--no-colors=true",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  std::string out;
  if (FILE* f = std::fopen(out_path.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  std::remove(out_path.c_str());
  INFO("child output:\n" << out);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(Contains(out, "Status: SUCCESS!"));
  CHECK(Contains(out, " 1 passed | 0 failed"));  // the case ran (the filter matched it)
}

}  // namespace
}  // namespace rt::model
