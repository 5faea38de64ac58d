// The benchmarks behind `ringtrain bench <kind>`: one file each (bench_<kind>.cc).
#pragma once

#include <string>
#include <vector>

namespace rt::cli {

int RunBenchCompute(const std::vector<std::string>& positional);
std::vector<std::string> BenchComputeFlagNames();

int RunBenchAllreduce(const std::vector<std::string>& positional);
std::vector<std::string> BenchAllreduceFlagNames();

int RunBenchCodec(const std::vector<std::string>& positional);
std::vector<std::string> BenchCodecFlagNames();

int RunBenchTransfer(const std::vector<std::string>& positional);
std::vector<std::string> BenchTransferFlagNames();

}  // namespace rt::cli
