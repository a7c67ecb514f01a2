// Stand-in for gloo/common/memory.h, which Debian's libgloo-dev 0.5.0 does not install although
// gloo/transport/tcp/{context,unbound_buffer}.h include it. Only the layout matters here (the
// classes are members of tcp::UnboundBuffer, whose constructor and destructor live in libgloo):
// the root reference is a std::shared_ptr, the weak one a std::weak_ptr, as in gloo 0.5.0.
// Used only when the system header is missing (backends/gloo/CMakeLists.txt).
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class ShareableNonOwningPtr;

template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& ref) : ptr_(ref.ptr_) {}

 private:
  std::weak_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr final {
 public:
  explicit ShareableNonOwningPtr(T* t) : ptr_(t, [](T*) {}) {}
  ShareableNonOwningPtr(const ShareableNonOwningPtr&) = delete;
  ShareableNonOwningPtr& operator=(const ShareableNonOwningPtr&) = delete;

 private:
  std::shared_ptr<T> ptr_;
  friend class WeakNonOwningPtr<T>;
};

}  // namespace gloo
