// --peer gloo: gloo::allreduce (options API, ring algorithm, what torch.distributed uses) over
// gloo's TCP transport, its context connected through the job's DistComm store with the gloo
// backend's own store adapter.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <net/if.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "distcomm/rendezvous/interface.hpp"
#include "gloo_store.hpp"
#include "peer.hpp"

namespace distcomm::bench {

namespace {

using reduce_fn = void (*)(void*, const void*, const void*, std::size_t);

template <class T>
reduce_fn gloo_fn(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return &gloo::sum<T>;
    case reduce_op::prod:
      return &gloo::product<T>;
    case reduce_op::min:
      return &gloo::min<T>;
    case reduce_op::max:
      return &gloo::max<T>;
  }
  return &gloo::sum<T>;
}

class gloo_peer final : public peer {
 public:
  explicit gloo_peer(const peer_world& w) : size_(w.size) {
    std::shared_ptr<store> kv = w.kv ? w.kv() : nullptr;
    if (!kv) kv = std::make_shared<hash_store>(w.timeout);  // a world of one
    gloo::transport::tcp::attr attr;
    const std::string host = default_bind_host("", w.single_node);  // as the gloo backend
    if (::if_nametoindex(host.c_str()) != 0) {
      attr.iface = host;
    } else {
      attr.hostname = host;
    }
    timeout_ = std::chrono::duration_cast<std::chrono::milliseconds>(w.timeout);
    try {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(w.rank, w.size);
      context_->setTimeout(timeout_);
      detail::gloo_store_adapter adapter(kv, "distcomm-bench/peer-gloo");
      context_->connectFullMesh(adapter, device);
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {
      throw backend_error("gloo", "connectFullMesh", 0, e.what());
    }
  }

  void allreduce(void* data, std::size_t count, dtype t, reduce_op op) override {
    if (count == 0) return;
    // Options are built once per buffer and reused, as a trainer would: their construction
    // (buffer registration) is setup, not part of the allreduce.
    if (!options_ || data != data_ || count != count_ || t != type_ || op != op_) {
      options_ = std::make_unique<gloo::AllreduceOptions>(context_);
      options_->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      options_->setTag(next_tag_++);
      options_->setTimeout(timeout_);
      switch (t) {
        case dtype::f32:
          set<float>(data, count, op);
          break;
        case dtype::f64:
          set<double>(data, count, op);
          break;
        case dtype::f16:
          set<gloo::float16>(data, count, op);  // the same IEEE binary16 bits as DistComm's f16
          break;
        case dtype::i8:
          set<std::int8_t>(data, count, op);
          break;
        case dtype::u8:
          set<std::uint8_t>(data, count, op);
          break;
        case dtype::i32:
          set<std::int32_t>(data, count, op);
          break;
        case dtype::i64:
          set<std::int64_t>(data, count, op);
          break;
        case dtype::bf16:
          options_.reset();
          throw invalid_argument_error("--peer gloo: gloo has no bfloat16 type");
      }
      data_ = data;
      count_ = count;
      type_ = t;
      op_ = op;
    }
    try {
      gloo::allreduce(*options_);
    } catch (const std::exception& e) {
      throw backend_error("gloo", "allreduce", 0, e.what());
    }
    if (op == reduce_op::avg) divide(data, data, count, t, static_cast<std::size_t>(size_));
  }

  std::string description() const override { return "gloo::allreduce, ring, tcp transport"; }

 private:
  template <class T>
  void set(void* data, std::size_t count, reduce_op op) {
    options_->setOutput(static_cast<T*>(data), count);
    options_->setReduceFunction(gloo_fn<T>(op));
  }

  int size_;
  std::chrono::milliseconds timeout_{};
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::unique_ptr<gloo::AllreduceOptions> options_;
  void* data_ = nullptr;
  std::size_t count_ = 0;
  dtype type_ = dtype::f32;
  reduce_op op_ = reduce_op::sum;
  std::uint32_t next_tag_ = 0;
};

}  // namespace

std::unique_ptr<peer> make_gloo_peer(const peer_world& w) { return std::make_unique<gloo_peer>(w); }

}  // namespace distcomm::bench
