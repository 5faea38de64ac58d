// safetensors serialization (see header).
#include "export/safetensors_writer.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/json_text.h"
#include "core/status_macros.h"

namespace rt::exporter {
namespace {

const char* DtypeTag(ExportDtype dtype) {
  switch (dtype) {
    case ExportDtype::kF32:
      return "F32";
    case ExportDtype::kF16:
      return "F16";
    case ExportDtype::kBf16:
      return "BF16";
  }
  return "?";
}

}  // namespace

uint64_t SafetensorsWriter::Tensor::bytes() const {
  uint64_t n = BytesPerValue(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

void SafetensorsWriter::AddTensor(const std::string& name, std::vector<int64_t> shape,
                                  ExportDtype dtype,
                                  std::function<void(std::string*)> append_data) {
  tensors_.push_back(Tensor{name, std::move(shape), dtype, std::move(append_data)});
}

std::string SafetensorsWriter::Header() const {
  std::string json = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : metadata_) {
    absl::StrAppend(&json, first ? "" : ",", JsonQuote(k), ":", JsonQuote(v));
    first = false;
  }
  json += "}";
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    absl::StrAppend(&json, ",", JsonQuote(t.name), ":{\"dtype\":\"", DtypeTag(t.dtype),
                    "\",\"shape\":[");
    for (size_t i = 0; i < t.shape.size(); ++i) absl::StrAppend(&json, i ? "," : "", t.shape[i]);
    absl::StrAppend(&json, "],\"data_offsets\":[", offset, ",", offset + t.bytes(), "]}");
    offset += t.bytes();
  }
  json += "}";
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::string header(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(header.data(), &n, 8);  // little-endian host
  return header + json;
}

absl::Status SafetensorsWriter::Write(FileSink* sink) const {
  std::set<std::string> seen;
  for (const Tensor& t : tensors_) {
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError("safetensors: duplicate tensor " + t.name);
    }
  }
  RETURN_IF_ERROR(sink->Append(Header()));
  std::string data;
  for (const Tensor& t : tensors_) {
    data.clear();
    t.append_data(&data);
    if (data.size() != t.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", t.name, " produced ",
                                                     data.size(), " bytes, expected ", t.bytes()));
    }
    RETURN_IF_ERROR(sink->Append(data));
  }
  return absl::OkStatus();
}

}  // namespace rt::exporter
