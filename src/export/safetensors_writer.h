// SafetensorsWriter: a .safetensors file as Hugging Face's `safetensors` reads it.
//
// FORMAT: uint64 little-endian N, then N bytes of UTF-8 JSON (padded with spaces so
// that 8 + N is a multiple of 8), then the data. The JSON object maps each tensor
// name to {"dtype": "F32"|"F16"|"BF16", "shape": [rows, cols, ...] (row-major,
// outermost first), "data_offsets": [begin, end)} (bytes from the start of the
// data), plus "__metadata__": {string: string}. Tensors are stored in the order
// added, back to back, each little-endian and row-major.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "export/staged_output.h"
#include "export/tensor_encoding.h"

namespace rt::exporter {

class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::map<std::string, std::string> metadata)
      : metadata_(std::move(metadata)) {}

  // `append_data` must append exactly product(shape) * BytesPerValue(dtype) bytes.
  void AddTensor(const std::string& name, std::vector<int64_t> shape, ExportDtype dtype,
                 std::function<void(std::string*)> append_data);

  // Errors: InvalidArgument (duplicate name, a callback of the wrong size), or I/O.
  absl::Status Write(FileSink* sink) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    ExportDtype dtype;
    std::function<void(std::string*)> append_data;
    uint64_t bytes() const;
  };
  std::string Header() const;
  std::map<std::string, std::string> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace rt::exporter
