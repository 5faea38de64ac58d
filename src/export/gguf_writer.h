// GgufWriter: a GGUF (version 3) file as llama.cpp and ggml read it.
//
// FORMAT (little-endian; strings are a uint64 byte length then the bytes, no NUL):
//   "GGUF"  uint32 version=3  uint64 tensor_count  uint64 kv_count
//   kv_count times:   string key, uint32 value type, value
//                     (arrays: uint32 element type, uint64 count, the elements)
//   tensor_count times: string name, uint32 n_dims, uint64 ne[n_dims] (innermost,
//                     i.e. contiguous, dimension first), uint32 ggml type,
//                     uint64 offset of the data from the start of the data section
//   padding to `general.alignment` (32 here), then each tensor's data at its offset
//   (every offset a multiple of 32, zero bytes between tensors).
// Value types: uint8 0, int8 1, uint16 2, int16 3, uint32 4, int32 5, float32 6,
// bool 7 (one byte), string 8, array 9, uint64 10, int64 11, float64 12.
// Keys are written in the order they were added; duplicates are refused at Write.
//
// Tensor data is produced at Write time by a callback, one tensor at a time, so a
// model larger than memory twice over can be written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "export/staged_output.h"

namespace rt::exporter {

enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kBf16 = 30 };
size_t GgmlTypeBytes(GgmlType type);  // 4 | 2 | 2

inline constexpr uint32_t kGgufAlignment = 32;

class GgufWriter {
 public:
  void AddString(const std::string& key, const std::string& value);
  void AddUint32(const std::string& key, uint32_t value);
  void AddUint64(const std::string& key, uint64_t value);
  void AddFloat32(const std::string& key, float value);
  void AddBool(const std::string& key, bool value);
  void AddStringArray(const std::string& key, const std::vector<std::string>& values);
  void AddFloat32Array(const std::string& key, const std::vector<float>& values);
  void AddInt32Array(const std::string& key, const std::vector<int32_t>& values);

  // `ne`: dimensions innermost first (a row-major (rows, cols) matrix is {cols, rows}).
  // `append_data` must append exactly product(ne) * GgmlTypeBytes(type) bytes.
  void AddTensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                 std::function<void(std::string*)> append_data);

  // Header, then every tensor's data. Errors: InvalidArgument (a duplicate key or
  // tensor name, a tensor whose callback appended the wrong number of bytes), or the
  // sink's I/O error.
  absl::Status Write(FileSink* sink) const;

  // Bytes Write will produce (header + aligned data).
  uint64_t FileBytes() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::function<void(std::string*)> append_data;
    uint64_t bytes() const;
  };
  std::string Header() const;
  std::vector<std::string> keys_;
  std::string kv_bytes_;  // the serialized key/value records, in order
  std::vector<Tensor> tensors_;
};

}  // namespace rt::exporter
