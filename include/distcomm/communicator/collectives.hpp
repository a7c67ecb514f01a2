// The per-call builders: for each entry of communicator/list.hpp, the validation of its arguments
// (on the caller's thread, communicator/validation.hpp), its fingerprint (check/fingerprint.hpp)
// and its body, what the strategy does with the backend (communicator/pipeline.hpp runs it). A new
// collective is a builder here, its entry in the list and its algorithm in the strategies.
#pragma once

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/communicator/pipeline.hpp"
#include "distcomm/communicator/traits.hpp"
#include "distcomm/communicator/validation.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/fusion/buffer.hpp"

namespace distcomm::detail {

template <class State>
class collectives {
  using Fusion = typename State::fusion_type;
  using requests = typename pipeline<State>::requests;

 public:
  // `queued`: the call runs later (a non-blocking form), so what the caller may free before it
  // runs is copied.
  explicit collectives(State& s, bool queued = false) : s_(s), queued_(queued) {}

  auto allreduce(tensor_view in, tensor_view out, reduce_op op) const {
    check_view("allreduce input", in);
    check_view("allreduce output", out);
    check_op(op);
    check_pair("allreduce", in, out, in.count, in.count);
    return make_call(
        "allreduce", fingerprint(check::call_kind::allreduce, in.count, in.type, op),
        [in, out, op](State& s, deadline until) {
          if (in.count == 0) return;
          s.strategy.allreduce(s.for_strategy(), in.data, out.data, in.count, in.type, op, until);
        },
        carried(check::carried_call::collective::allreduce, in, out, in.count, op));
  }

  // A queued call copies the views: the caller's list may go before it runs.
  auto allreduce(span<const tensor_view> tensors, reduce_op op) const {
    for (const tensor_view& t : tensors) check_view("grouped allreduce tensor", t);
    check_op(op);
    if constexpr (State::moves_device && std::is_same_v<Fusion, fusion::buffer>) {
      // fusion::buffer packs with host copies; device tensors need a device-side packer.
      throw invalid_argument_error(std::string("grouped allreduce: backend '") + s_.backend_name() +
                                   "' moves device memory, which fusion::buffer cannot pack; "
                                   "use communicator<..., cuda::fusion> (from "
                                   "<distcomm/cuda/fusion.hpp>) or fusion::none");
    }
    const auto fp = check::grouped_fingerprint(tensors, static_cast<int>(op), s_.check.settings());
    std::vector<tensor_view> copied;
    if (queued_) copied.assign(tensors.begin(), tensors.end());
    return make_call(
        "grouped allreduce", fp,
        [tensors, copied = std::move(copied), op](State& s, deadline until) {
          const span<const tensor_view> all =
              copied.empty() ? tensors : span<const tensor_view>(copied.data(), copied.size());
          const auto one = [&](const void* in, void* out, std::size_t count, dtype t, reduce_op o) {
            s.strategy.allreduce(s.for_strategy(), in, out, count, t, o, until);
          };
          if constexpr (fusion_takes_backend<Fusion>::value) {
            s.fusion.allreduce(s.backend, all, op, until, one);  // on its stream
          } else {
            s.fusion.allreduce(all, op, one);
          }
        });
  }

  auto reduce_scatter(tensor_view in, tensor_view out, reduce_op op) const {
    check_view("reduce_scatter input", in);
    check_view("reduce_scatter output", out);
    check_op(op);
    check_pair("reduce_scatter", in, out, checked_mul(out.count, size(), "reduce_scatter"),
               out.count);
    return make_call("reduce_scatter",
                     fingerprint(check::call_kind::reduce_scatter, out.count, in.type, op),
                     [in, out, op](State& s, deadline until) {
                       if (out.count == 0) return;
                       s.strategy.reduce_scatter(s.for_strategy(), in.data, out.data, out.count,
                                                 in.type, op, until);
                     });
  }

  auto allgather(tensor_view in, tensor_view out) const {
    check_view("allgather input", in);
    check_view("allgather output", out);
    check_pair("allgather", in, out, in.count, checked_mul(in.count, size(), "allgather"));
    return make_call(
        "allgather", fingerprint(check::call_kind::allgather, in.count, in.type),
        [in, out](State& s, deadline until) {
          if (in.count == 0) return;
          s.strategy.allgather(s.for_strategy(), in.data, out.data, in.count, in.type, until);
        },
        carried(check::carried_call::collective::allgather, in, out, in.count));
  }

  auto broadcast(tensor_view data, int root) const {
    check_view("broadcast buffer", data);
    check_root("broadcast", root, size());
    return make_call(
        "broadcast", fingerprint(check::call_kind::broadcast, data.count, data.type, {}, root),
        [data, root](State& s, deadline until) {
          if (data.count == 0) return;
          s.strategy.broadcast(s.for_strategy(), data.data, data.count, data.type, root, until);
        },
        carried(check::carried_call::collective::broadcast, data, data, data.count, {}, root));
  }

  auto alltoall(tensor_view in, tensor_view out) const {
    check_view("alltoall input", in);
    check_view("alltoall output", out);
    const auto p = static_cast<std::size_t>(size());
    if (in.count % p != 0) {
      throw invalid_argument_error("alltoall: input has " + std::to_string(in.count) +
                                   " elements, not a multiple of the " + std::to_string(p) +
                                   " ranks");
    }
    const std::size_t block = in.count / p;
    check_pair("alltoall", in, out, in.count, in.count);
    check_disjoint("alltoall", in, out);
    return make_call(
        "alltoall", fingerprint(check::call_kind::alltoall, block, in.type),
        [in, out, block](State& s, deadline until) {
          if (block == 0) return;
          s.strategy.alltoall(s.for_strategy(), in.data, out.data, block, in.type, until);
        },
        carried(check::carried_call::collective::alltoall, in, out, in.count));
  }

  auto alltoallv(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                 span<const std::size_t> recv_counts, span<const std::size_t> send_displs,
                 span<const std::size_t> recv_displs) const {
    check_view("alltoallv input", in);
    check_view("alltoallv output", out);
    check_same_type("alltoallv", in, out);
    check_disjoint("alltoallv", in, out);
    // One buffer, [send counts | recv counts | send displs | recv displs]; its first 2p words are
    // also the counts that ride in the call check's exchange where they fit (check/carried.hpp),
    // as 64-bit words. It moves into the body with the carried call pointing into it.
    static_assert(sizeof(std::size_t) == sizeof(std::uint64_t), "counts travel as 64-bit words");
    const auto p = static_cast<std::size_t>(size());
    std::vector<std::size_t> layout(4 * p);
    layout_of("alltoallv", "send", send_counts, send_displs, in.count, size(), &layout[2 * p]);
    layout_of("alltoallv", "recv", recv_counts, recv_displs, out.count, size(), &layout[3 * p]);
    std::copy(send_counts.begin(), send_counts.end(), layout.begin());
    std::copy(recv_counts.begin(), recv_counts.end(), layout.begin() + static_cast<long>(p));
    const auto me = static_cast<std::size_t>(rank());
    if (layout[me] != layout[p + me]) {
      throw invalid_argument_error("alltoallv: rank " + std::to_string(rank()) + " sends " +
                                   std::to_string(layout[me]) + " elements to itself but expects " +
                                   std::to_string(layout[p + me]));
    }
    const check::carried_call counts{check::carried_call::collective::alltoallv_counts,
                                     layout.data(), nullptr, 2 * p, dtype::i64};
    return make_call(
        "alltoallv", fingerprint(check::call_kind::alltoallv, 0, in.type),
        [in, out, p, layout = std::move(layout)](State& s, deadline until) {
          const std::size_t* sc = layout.data();
          if constexpr (takes_agreed_counts<
                            decltype(s.strategy),
                            std::remove_reference_t<decltype(s.for_strategy())>>::value) {
            s.strategy.alltoallv(s.for_strategy(), in.data, sc, sc + 2 * p, out.data, sc + p,
                                 sc + 3 * p, in.type, until, s.check.counts_agreed());
          } else {
            s.strategy.alltoallv(s.for_strategy(), in.data, sc, sc + 2 * p, out.data, sc + p,
                                 sc + 3 * p, in.type, until);
          }
        },
        counts);
  }

  auto allgatherv(tensor_view in, tensor_view out, span<const std::size_t> counts,
                  span<const std::size_t> displs) const {
    check_view("allgatherv input", in);
    check_view("allgatherv output", out);
    check_same_type("allgatherv", in, out);
    std::vector<std::size_t> c(counts.begin(), counts.end());
    std::vector<std::size_t> d(static_cast<std::size_t>(size()));
    layout_of("allgatherv", "", counts, displs, out.count, size(), d.data());
    const auto me = static_cast<std::size_t>(rank());
    if (in.count != c[me]) {
      throw invalid_argument_error("allgatherv: input has " + std::to_string(in.count) +
                                   " elements, but counts[" + std::to_string(rank()) + "] is " +
                                   std::to_string(c[me]));
    }
    const auto fp = check::counts_fingerprint(check::call_kind::allgatherv,
                                              span<const std::size_t>(c.data(), c.size()),
                                              static_cast<int>(in.type), s_.check.settings());
    return make_call("allgatherv", fp,
                     [in, out, c = std::move(c), d = std::move(d)](State& s, deadline until) {
                       s.strategy.allgatherv(s.for_strategy(), in.data, out.data, c.data(),
                                             d.data(), in.type, until);
                     });
  }

  auto reduce(tensor_view in, tensor_view out, reduce_op op, int root) const {
    check_view("reduce input", in);
    check_op(op);
    check_root("reduce", root, size());
    if (rank() == root) {
      check_view("reduce output", out);
      check_pair("reduce", in, out, in.count, in.count);
    }
    return make_call("reduce", fingerprint(check::call_kind::reduce, in.count, in.type, op, root),
                     [in, out, op, root](State& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.reduce(s.for_strategy(), in.data, out.data, in.count, in.type, op,
                                         root, until);
                     });
  }

  auto gather(tensor_view in, tensor_view out, int root) const {
    check_view("gather input", in);
    check_root("gather", root, size());
    if (rank() == root) {
      check_view("gather output", out);
      check_pair("gather", in, out, in.count, checked_mul(in.count, size(), "gather"));
    }
    return make_call("gather", fingerprint(check::call_kind::gather, in.count, in.type, {}, root),
                     [in, out, root](State& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.gather(s.for_strategy(), in.data, out.data, in.count, in.type,
                                         root, until);
                     });
  }

  auto scatter(tensor_view in, tensor_view out, int root) const {
    check_view("scatter output", out);
    check_root("scatter", root, size());
    if (rank() == root) {
      check_view("scatter input", in);
      check_pair("scatter", in, out, checked_mul(out.count, size(), "scatter"), out.count);
    }
    return make_call(
        "scatter", fingerprint(check::call_kind::scatter, out.count, out.type, {}, root),
        [in, out, root](State& s, deadline until) {
          if (out.count == 0) return;
          s.strategy.scatter(s.for_strategy(), in.data, out.data, out.count, out.type, root, until);
        });
  }

  // With the mismatch check on, the agreement before it is a barrier by itself.
  auto barrier() const {
    return make_call("barrier", fingerprint(check::call_kind::barrier),
                     [](State& s, deadline until) {
                       if (!s.check.exchanges(s.backend.size())) {
                         s.strategy.barrier(s.for_strategy(), until);
                       }
                     });
  }

  // Point-to-point: bodies that post the messages and return their requests.
  auto send(tensor_view data, int peer, int tag) const { return message(true, data, peer, tag); }
  auto recv(tensor_view data, int peer, int tag) const { return message(false, data, peer, tag); }

  auto recv_any(tensor_view data, int* source, int tag) const {
    using Backend = typename State::backend_type;
    check_view("recv_any buffer", data);
    if (!has_irecv_any<Backend>::value) {
      throw invalid_argument_error(std::string("recv_any: backend '") + s_.backend_name() +
                                   "' cannot receive from any rank (it matches messages per "
                                   "sender); name the source rank, or use local, shm, gloo or ucx");
    }
    if (data.count == 0 || source == nullptr || size() == 1) {
      throw invalid_argument_error(
          data.count == 0 ? "recv_any: the buffer is empty, and an empty send posts no message"
          : source == nullptr
              ? "recv_any: `source` is null; it is where the sender's rank goes"
              : "recv_any: this communicator has one rank: no other can send to it");
    }
    check_tag("recv_any", tag);
    const tag_t t = user_tag_base + static_cast<tag_t>(tag);
    auto fp = fingerprint(check::call_kind::point_to_point, data.count, data.type);
    return make_call("recv_any", fp, [data, source, t](State& s, deadline) {
      requests posted;
      if constexpr (has_irecv_any<Backend>::value) {
        posted.push_back(s.backend.irecv_any(data.data, data.bytes(), source, t));
      }
      return posted;
    });
  }

  auto sendrecv(tensor_view out, int dest, tensor_view in, int source, int tag) const {
    check_view("sendrecv send buffer", out);
    check_view("sendrecv recv buffer", in);
    check_peer("sendrecv", dest, tag, rank(), size());
    check_peer("sendrecv", source, tag, rank(), size());
    const tag_t t = user_tag_base + static_cast<tag_t>(tag);
    auto fp = fingerprint(check::call_kind::point_to_point, out.count, out.type);
    return make_call("sendrecv", fp, [out, dest, in, source, t](State& s, deadline) {
      requests posted;
      if (in.count != 0) posted.push_back(s.backend.irecv(in.data, in.bytes(), source, t));
      if (out.count != 0) posted.push_back(s.backend.isend(out.data, out.bytes(), dest, t));
      return posted;
    });
  }

 private:
  auto message(bool sending, tensor_view data, int peer, int tag) const {
    const char* what = sending ? "send" : "recv";
    check_view(sending ? "send buffer" : "recv buffer", data);
    check_peer(what, peer, tag, rank(), size());
    const tag_t t = user_tag_base + static_cast<tag_t>(tag);
    auto fp = fingerprint(check::call_kind::point_to_point, data.count, data.type);
    return make_call(what, fp, [data, peer, t, sending](State& s, deadline) {
      requests posted;
      if (data.count == 0) return posted;
      if (sending) {
        posted.push_back(s.backend.isend(data.data, data.bytes(), peer, t));
      } else {
        posted.push_back(s.backend.irecv(data.data, data.bytes(), peer, t));
      }
      return posted;
    });
  }

  int rank() const { return s_.backend.rank(); }
  int size() const { return s_.backend.size(); }
  void check_view(const char* what, const tensor_view& t) const {
    check_tensor(what, t, State::moved, s_.backend_name());
  }
  check::call_fingerprint fingerprint(check::call_kind kind, std::size_t count = 0,
                                      std::optional<dtype> t = {}, std::optional<reduce_op> op = {},
                                      int root = -1) const {
    return check::make_fingerprint(kind, s_.check.settings(), count, t ? static_cast<int>(*t) : -1,
                                   op ? static_cast<int>(*op) : -1, root);
  }

  // What the call check may carry in its own exchange (check/carried.hpp): `count` elements of
  // `in` from each rank.
  static check::carried_call carried(check::carried_call::collective what, const tensor_view& in,
                                     const tensor_view& out, std::size_t count,
                                     reduce_op op = reduce_op::sum, int root = -1) {
    return {what, in.data, out.data, count, in.type, op, root};
  }

  State& s_;
  bool queued_;
};

}  // namespace distcomm::detail
