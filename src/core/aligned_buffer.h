// AlignedBuffer<T>: an owning, 64-byte-aligned, zero-initialised array.
//
// DESIGN invariant 1: parameters, gradients and optimizer moments each live in one
// such buffer; tensors are (offset, shape) views into it. 64 bytes = one cache line
// = one AVX-512 register, so every view that starts at a multiple of 16 floats is
// aligned for vector loads.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "absl/types/span.h"

namespace rt {

inline constexpr size_t kBufferAlignBytes = 64;

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) { Resize(count); }
  ~AlignedBuffer() { std::free(data_); }

  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // Discards the contents and holds `count` zeroed elements.
  void Resize(size_t count) {
    std::free(data_);
    data_ = nullptr;
    size_ = count;
    if (count == 0) return;
    size_t bytes = (count * sizeof(T) + kBufferAlignBytes - 1) / kBufferAlignBytes * kBufferAlignBytes;
    data_ = static_cast<T*>(std::aligned_alloc(kBufferAlignBytes, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  void Zero() {
    if (size_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  absl::Span<T> span() { return absl::Span<T>(data_, size_); }
  absl::Span<const T> span() const { return absl::Span<const T>(data_, size_); }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace rt
