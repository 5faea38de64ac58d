// GGUF serialization (see header for the layout).
#include "export/gguf_writer.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace rt::exporter {
namespace {

enum ValueType : uint32_t {
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
};

template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64: already little-endian
  out->append(bytes, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

uint64_t AlignUp(uint64_t n) { return (n + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment; }

}  // namespace

size_t GgmlTypeBytes(GgmlType type) { return type == GgmlType::kF32 ? 4 : 2; }

uint64_t GgufWriter::Tensor::bytes() const {
  uint64_t n = GgmlTypeBytes(type);
  for (int64_t d : ne) n *= static_cast<uint64_t>(d);
  return n;
}

void GgufWriter::AddString(const std::string& key, const std::string& value) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kString);
  PutString(&kv_bytes_, value);
}

void GgufWriter::AddUint32(const std::string& key, uint32_t value) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kUint32);
  Put<uint32_t>(&kv_bytes_, value);
}

void GgufWriter::AddUint64(const std::string& key, uint64_t value) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kUint64);
  Put<uint64_t>(&kv_bytes_, value);
}

void GgufWriter::AddFloat32(const std::string& key, float value) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kFloat32);
  Put<float>(&kv_bytes_, value);
}

void GgufWriter::AddBool(const std::string& key, bool value) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kBool);
  Put<uint8_t>(&kv_bytes_, value ? 1 : 0);
}

void GgufWriter::AddStringArray(const std::string& key, const std::vector<std::string>& values) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kArray);
  Put<uint32_t>(&kv_bytes_, kString);
  Put<uint64_t>(&kv_bytes_, values.size());
  for (const std::string& v : values) PutString(&kv_bytes_, v);
}

void GgufWriter::AddFloat32Array(const std::string& key, const std::vector<float>& values) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kArray);
  Put<uint32_t>(&kv_bytes_, kFloat32);
  Put<uint64_t>(&kv_bytes_, values.size());
  for (float v : values) Put<float>(&kv_bytes_, v);
}

void GgufWriter::AddInt32Array(const std::string& key, const std::vector<int32_t>& values) {
  keys_.push_back(key);
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, kArray);
  Put<uint32_t>(&kv_bytes_, kInt32);
  Put<uint64_t>(&kv_bytes_, values.size());
  for (int32_t v : values) Put<int32_t>(&kv_bytes_, v);
}

void GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                           std::function<void(std::string*)> append_data) {
  tensors_.push_back(Tensor{name, std::move(ne), type, std::move(append_data)});
}

std::string GgufWriter::Header() const {
  std::string h = "GGUF";
  Put<uint32_t>(&h, 3);
  Put<uint64_t>(&h, tensors_.size());
  Put<uint64_t>(&h, keys_.size());
  h += kv_bytes_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(&h, t.name);
    Put<uint32_t>(&h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<uint64_t>(&h, static_cast<uint64_t>(d));
    Put<uint32_t>(&h, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&h, offset);
    offset = AlignUp(offset + t.bytes());
  }
  h.resize(AlignUp(h.size()), '\0');
  return h;
}

uint64_t GgufWriter::FileBytes() const {
  uint64_t n = Header().size();
  for (const Tensor& t : tensors_) n = AlignUp(n + t.bytes());
  return n;
}

absl::Status GgufWriter::Write(FileSink* sink) const {
  std::set<std::string> seen;
  for (const std::string& k : keys_) {
    if (!seen.insert(k).second) return absl::InvalidArgumentError("GGUF: duplicate key " + k);
  }
  seen.clear();
  for (const Tensor& t : tensors_) {
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError("GGUF: duplicate tensor " + t.name);
    }
  }
  RETURN_IF_ERROR(sink->Append(Header()));
  std::string data;
  for (const Tensor& t : tensors_) {
    data.clear();
    t.append_data(&data);
    if (data.size() != t.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF: tensor ", t.name, " produced ",
                                                     data.size(), " bytes, expected ", t.bytes()));
    }
    data.resize(AlignUp(data.size()), '\0');  // the header is aligned, so offsets stay aligned
    RETURN_IF_ERROR(sink->Append(data));
  }
  return absl::OkStatus();
}

}  // namespace rt::exporter
