// A minimal contiguous range (C++20's std::span is not available to C++17 users); used for the
// grouped calls that take a whole gradient set.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace distcomm {

template <class T>
class span {
 public:
  constexpr span() noexcept = default;
  constexpr span(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  template <class U, class A>
  span(std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT
  template <class U, class A>
  span(const std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT
  span(std::initializer_list<std::remove_const_t<T>> l) noexcept                   // NOLINT
      : data_(l.begin()), size_(l.size()) {}

  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* data() const noexcept { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace distcomm
