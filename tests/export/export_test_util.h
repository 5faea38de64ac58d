// Helpers for the export layer's tests: a small trained SentencePiece model (shared),
// and a strict reader of GGUF files written by GgufWriter, independent of it.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "data/tokenizer_trainer.h"

namespace rt::exporter::testing {

using ::rt::testing::ReadFile;
using ::rt::testing::TempDir;

// A BPE model trained by ringtrain's tokenizer trainer on Vietnamese lines (vocab 320).
inline const std::string& SmallTokenizerModel() {
  static const std::string model = [] {
    std::vector<std::string> lines;
    for (int r = 0; r < 40; ++r) {
      lines.push_back("Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.");
      lines.push_back("Đà Nẵng có 8 quận, huyện và dân số khoảng 1,2 triệu người.");
      lines.push_back("Sông Mê Kông chảy qua sáu quốc gia trước khi đổ ra Biển Đông.");
    }
    data::TokenizerTrainOptions o;
    o.vocab_size = 320;
    absl::StatusOr<std::string> m = data::TrainTokenizer(lines, o);
    REQUIRE(m.ok());
    return *m;
  }();
  return model;
}

// A parsed GGUF file. Throws std::runtime_error on anything malformed.
struct GgufFile {
  struct Value {
    uint32_t type = 0;
    uint64_t u = 0;  // unsigned ints, bool
    int64_t i = 0;
    double f = 0;
    std::string s;
    uint32_t array_type = 0;
    std::vector<Value> array;
  };
  struct Tensor {
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t offset = 0;  // absolute, in the file
  };
  uint32_t version = 0;
  std::vector<std::string> key_order;
  std::map<std::string, Value> kv;
  std::vector<std::string> tensor_order;
  std::map<std::string, Tensor> tensors;
  std::string bytes;

  static GgufFile Parse(std::string bytes) {
    GgufFile g;
    g.bytes = std::move(bytes);
    size_t pos = 0;
    auto need = [&](size_t n) {
      if (g.bytes.size() - pos < n) throw std::runtime_error("truncated");
    };
    auto u32 = [&] {
      need(4);
      uint32_t v;
      std::memcpy(&v, g.bytes.data() + pos, 4);
      pos += 4;
      return v;
    };
    auto u64 = [&] {
      need(8);
      uint64_t v;
      std::memcpy(&v, g.bytes.data() + pos, 8);
      pos += 8;
      return v;
    };
    auto str = [&] {
      const uint64_t n = u64();
      need(n);
      std::string s = g.bytes.substr(pos, n);
      pos += n;
      return s;
    };
    std::function<Value(uint32_t)> value = [&](uint32_t type) {
      Value v;
      v.type = type;
      switch (type) {
        case 4:
          v.u = u32();
          break;
        case 5:
          v.i = static_cast<int32_t>(u32());
          break;
        case 6: {
          const uint32_t bits = u32();
          float f;
          std::memcpy(&f, &bits, 4);
          v.f = f;
          break;
        }
        case 7:
          need(1);
          v.u = static_cast<uint8_t>(g.bytes[pos++]);
          if (v.u > 1) throw std::runtime_error("bool not 0/1");
          break;
        case 8:
          v.s = str();
          break;
        case 9: {
          v.array_type = u32();
          const uint64_t n = u64();
          for (uint64_t k = 0; k < n; ++k) v.array.push_back(value(v.array_type));
          break;
        }
        case 10:
          v.u = u64();
          break;
        default:
          throw std::runtime_error("unexpected value type " + std::to_string(type));
      }
      return v;
    };
    need(4);
    if (g.bytes.compare(0, 4, "GGUF") != 0) throw std::runtime_error("bad magic");
    pos = 4;
    g.version = u32();
    const uint64_t n_tensors = u64(), n_kv = u64();
    for (uint64_t k = 0; k < n_kv; ++k) {
      std::string key = str();
      const uint32_t type = u32();
      if (g.kv.count(key)) throw std::runtime_error("duplicate key " + key);
      g.key_order.push_back(key);
      g.kv[key] = value(type);
    }
    std::vector<Tensor> infos;
    for (uint64_t k = 0; k < n_tensors; ++k) {
      std::string name = str();
      Tensor t;
      const uint32_t dims = u32();
      for (uint32_t d = 0; d < dims; ++d) t.ne.push_back(u64());
      t.type = u32();
      t.offset = u64();
      g.tensor_order.push_back(name);
      g.tensors[name] = t;
    }
    const size_t data_start = (pos + 31) / 32 * 32;
    for (auto& [name, t] : g.tensors) {
      if (t.offset % 32 != 0) throw std::runtime_error("unaligned tensor " + name);
      t.offset += data_start;
      if (t.offset + TensorBytes(t) > g.bytes.size()) {
        throw std::runtime_error("tensor " + name + " runs past the end");
      }
    }
    return g;
  }

  static uint64_t TensorBytes(const Tensor& t) {
    uint64_t n = t.type == 0 ? 4 : 2;
    for (uint64_t d : t.ne) n *= d;
    return n;
  }
  // Tensor values as float (F32 only).
  std::vector<float> F32(const std::string& name) const {
    const Tensor& t = tensors.at(name);
    if (t.type != 0) throw std::runtime_error(name + " is not F32");
    std::vector<float> v(TensorBytes(t) / 4);
    std::memcpy(v.data(), bytes.data() + t.offset, v.size() * 4);
    return v;
  }
  std::vector<uint16_t> U16(const std::string& name) const {
    const Tensor& t = tensors.at(name);
    if (t.type == 0) throw std::runtime_error(name + " is F32");
    std::vector<uint16_t> v(TensorBytes(t) / 2);
    std::memcpy(v.data(), bytes.data() + t.offset, v.size() * 2);
    return v;
  }
};

}  // namespace rt::exporter::testing
