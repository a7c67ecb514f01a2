// fusion::buffer: Tensor Fusion. The small tensors of a grouped allreduce are grouped by dtype (in
// dtype order, then call order) and packed into one reused buffer of up to `threshold` bytes
// (DISTCOMM_FUSION_THRESHOLD, default 64 MiB); one collective runs per buffer, then the results
// are copied back. A tensor of at least `cutoff` bytes (DISTCOMM_FUSION_CUTOFF, default 1 MiB or
// the backend's own) or
// at least the threshold runs in place, unpacked. Threshold 0 disables fusion. avg needs no extra
// pass here: the strategy divides each reduced segment while it is still in cache.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/strategy/detail.hpp"
#include "distcomm/trace/timeline.hpp"

namespace distcomm::fusion {

class buffer {
 public:
  static constexpr const char* name = "buffer";
  explicit buffer(const config& c)
      : buffer(c.fusion_threshold, c.fusion_cutoff.value_or(default_fusion_cutoff)) {}
  explicit buffer(std::size_t threshold_bytes, std::size_t cutoff_bytes = default_fusion_cutoff)
      : threshold_(threshold_bytes), cutoff_(cutoff_bytes) {}

  std::size_t threshold() const noexcept { return threshold_; }
  std::size_t cutoff() const noexcept { return cutoff_; }
  // Bytes currently held for packing (grows to at most the threshold, then is reused).
  std::size_t capacity() const noexcept { return storage_.capacity(); }

  // Whether a tensor of `bytes` bytes is reduced in place rather than packed. Packing costs a
  // copy in and a copy out, 2n bytes at memory bandwidth; a call of its own costs one
  // collective's latency. Past the cutoff the copies cost more than the latency they save
  // (docs/COLLECTIVES.md, Fusion; the measurements: docs/PERFORMANCE.md, "The fusion cutoff").
  bool in_place(std::size_t bytes) const noexcept {
    return bytes >= threshold_ || (cutoff_ != 0 && bytes >= cutoff_);
  }

  // run(in, out, count, dtype, op) performs one allreduce.
  template <class Run>
  void allreduce(span<const tensor_view> tensors, reduce_op op, Run&& run) {
    for (dtype t : all_dtypes) {
      pending_.clear();
      std::size_t pending_bytes = 0;
      const auto flush = [&] {
        if (pending_.empty()) return;
        if (pending_.size() == 1) {  // nothing to fuse with: skip the copies
          const tensor_view& v = *pending_.front();
          run(v.data, v.data, v.count, t, op);
        } else {
          unsigned char* packed = storage_.get(pending_bytes);
          const auto t0 = timeline_ ? trace::timeline::now() : trace::timeline::time_point{};
          std::size_t offset = 0;
          for (const tensor_view* v : pending_) {
            std::memcpy(packed + offset, v->data, v->bytes());
            offset += v->bytes();
          }
          traced("pack", t0, pending_bytes);
          run(packed, packed, pending_bytes / dtype_size(t), t, op);
          const auto t1 = timeline_ ? trace::timeline::now() : trace::timeline::time_point{};
          offset = 0;
          for (const tensor_view* v : pending_) {
            std::memcpy(v->data, packed + offset, v->bytes());
            offset += v->bytes();
          }
          traced("unpack", t1, pending_bytes);
        }
        pending_.clear();
        pending_bytes = 0;
      };
      // A large tensor runs as soon as it is met, without closing the bucket: models interleave
      // small tensors (biases, norms) with large ones, and closing the bucket at every large
      // tensor would leave one small collective per layer.
      for (const tensor_view& v : tensors) {
        if (v.type != t || v.count == 0) continue;
        const std::size_t bytes = v.bytes();
        if (in_place(bytes)) {
          run(v.data, v.data, v.count, t, op);
          continue;
        }
        if (pending_bytes + bytes > threshold_) flush();
        pending_.push_back(&v);
        pending_bytes += bytes;
      }
      flush();
    }
  }

  // With DISTCOMM_TIMELINE set, the communicator hands its track over: packing and unpacking
  // become spans of it.
  void trace_to(std::shared_ptr<trace::timeline> t, int track) {
    timeline_ = std::move(t);
    track_ = track;
  }

 private:
  void traced(const char* what, trace::timeline::time_point begin, std::size_t bytes) {
    if (!timeline_) return;
    timeline_->span(track_, what, "fusion", begin, trace::timeline::now(),
                    "\"bytes\": " + std::to_string(bytes) +
                        ", \"tensors\": " + std::to_string(pending_.size()));
  }

  std::shared_ptr<trace::timeline> timeline_;
  int track_ = 0;
  std::size_t threshold_;
  std::size_t cutoff_;
  strategy::detail::scratch storage_;
  std::vector<const tensor_view*> pending_;
};

}  // namespace distcomm::fusion
