#include "process_group.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>

#include "c10d_store.hpp"
#include "distcomm/backend_traits.hpp"
#include "distcomm/init.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/rendezvous/host_names.hpp"
#include "distcomm/trace/recorder_names.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace distcomm::torch_binding {

namespace {

// The group's settings: DISTCOMM_* as everywhere. Its timeout: the one the program gave
// (init_process_group(timeout=...), new_group(timeout=...)); else DISTCOMM_TIMEOUT when set; else
// torch's default. Torch passes its default when the program names none, so a timeout equal to it
// counts as none given.
config settings_for(std::chrono::milliseconds timeout) {
  config cfg = config::from_env();
  const char* own = config::read_variable("DISTCOMM_TIMEOUT");
  const bool ambient = own != nullptr && *own != '\0';
  if (timeout != torch_default_timeout || !ambient) cfg.timeout = timeout;
  return cfg;
}

// What a group's calls end within, for call_order: its timeout.
std::chrono::milliseconds calls_end_within(const config& cfg) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(cfg.timeout);
}

// A message's completion, on DistComm's progress thread: the group's order counts as busy until
// `done` has been let go there (members go in reverse order).
struct ending {
  call_order::busy busy;
  std::shared_ptr<completion> done;
};

// This rank's world within the group: its rank and size from PyTorch, and which of the group's
// ranks share its host, learned through the group's store (the launcher's variables describe the
// whole job, not a subgroup, and PyTorch's own test harness sets WORLD_SIZE without RANK).
world_info world_of(store& kv, int rank, int size, const config& cfg) {
  const std::vector<std::string> hosts =
      host_names(kv, "distcomm_torch/host/", rank, size, cfg.timeout);
  world_info w;
  w.rank = rank;
  w.size = size;
  w.local_size = 0;
  for (int q = 0; q < size; ++q) {
    if (hosts[static_cast<std::size_t>(q)] != hosts[static_cast<std::size_t>(rank)]) continue;
    if (q < rank) ++w.local_rank;
    ++w.local_size;
  }
  return w;
}

std::shared_ptr<store> store_of(const c10::intrusive_ptr<c10d::Store>& s, const config& cfg) {
  return std::make_shared<c10d_store>(s, cfg.timeout);
}

any_communicator connect(const std::shared_ptr<store>& kv, int rank, int size, const config& cfg,
                         const torch_group& named) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "distcomm: rank ", rank,
              " is not a rank of a group of ", size);
  job j;
  j.world = world_of(*kv, rank, size, cfg);
  j.kv = kv;
  init_options o;
  o.backend = cfg.backend.empty() ? backend_for(size, j.world.single_node()) : cfg.backend;
  o.settings = cfg;
  if (!named.name.empty()) trace::name_next_recorder(named.name, named.global_ranks);
  try {
    return init(j, o);
  } catch (const error& e) {
    TORCH_CHECK(false, "distcomm: rank ", rank, " of ", size, " could not connect over ", o.backend,
                ": ", e.what());
  }
}

// f(), the GIL let go meanwhile when this thread holds it: what f waits for (the other ranks, the
// group's thread running a callback, a tensor freed there) may need it.
template <class F>
decltype(auto) without_gil(F&& f) {
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
    const pybind11::gil_scoped_release release;
    return f();
  }
  return f();
}

std::vector<at::Tensor> flat_list(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
  return all;
}

}  // namespace

std::string backend_for(int size, bool one_host) {
  world_info w;
  w.size = size;
  w.local_size = one_host ? size : 1;
  try {
    return default_backend(w, /*through_store=*/true);  // the ranks meet through PyTorch's store
  } catch (const invalid_argument_error& e) {
    TORCH_CHECK(false, "distcomm: ", e.what());
  }
}

process_group::process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout, const torch_group& named)
    : torch_backend(rank, size),
      cfg_(settings_for(timeout)),
      kv_(store_of(store, cfg_)),
      comm_(connect(kv_, rank, size, cfg_, named)),
      order_(calls_end_within(cfg_)) {
  init();  // torch's: its logging of the group
  keep_options();
}

void process_group::keep_options() {
#if TORCH_VERSION_MAJOR >= 2
  options_ = c10::make_intrusive<Options>(
      getBackendName(), std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.timeout));
#endif
}

process_group::process_group(const process_group& parent, any_communicator comm)
    : torch_backend(comm.rank(), comm.size()),
      cfg_(parent.cfg_),
      kv_(parent.kv_),
      comm_(std::move(comm)),
      order_(calls_end_within(cfg_)) {
  init();
  keep_options();
}

// Python drops the group with the GIL held (destroy_process_group, or the interpreter's end), and
// closing it waits for its progress thread, which may need the GIL itself: a tensor given to a
// collective whose Python object died meanwhile (`dist.all_reduce(t, async_op=True)` with `t`
// forgotten, as a DDP bucket is) frees that object, under the GIL, when the collective lets the
// tensor go. Holding the GIL here would wait for that forever, so it is let go meanwhile.
process_group::~process_group() { close(); }

void process_group::close() noexcept {
  without_gil([this] {
    order_.close();                                 // what was called runs first
    const any_communicator gone(std::move(comm_));  // its progress thread joined here
    closed_ = true;
  });
}

void process_group::refuse_if(bool closed) const {
  TORCH_CHECK(!closed, "distcomm: the group was closed by ", closed_by_ ? closed_by_ : "its end",
              "; make a new group (init_process_group, new_group) to go on");
}

any_communicator& process_group::comm() {
  refuse_if(closed_);
  return comm_;
}

std::string process_group::transport() const {
  if (closed_by_ != nullptr) return std::string("closed by ") + closed_by_;
  return std::string(comm_.backend_name()) + "/" + comm_.strategy_name();
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<c10d::Backend> process_group::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::vector<int>& ranks,
                                                       const c10::intrusive_ptr<Options>& opts) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  const auto timeout = opts ? opts->timeout : torch_default_timeout;
  torch_group named;  // what torch says of the child (split_group fills both)
  if (opts) {
    named.name = opts->group_name;
    named.global_ranks.assign(opts->global_ranks_in_group.begin(),
                              opts->global_ranks_in_group.end());
  }
  return without_gil([&] {  // connecting waits for the others
    return c10::make_intrusive<process_group>(store, static_cast<int>(me - ranks.begin()),
                                              static_cast<int>(ranks.size()), timeout, named);
  });
}

bool process_group::supportsShrinking() const {
  return closed_by_ == nullptr && traits_of(comm_.backend_name()).can(capability::shrink);
}

c10::intrusive_ptr<c10d::Backend> process_group::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int, const c10::intrusive_ptr<Options>&) {
  // torch checked the list: ranks of this group, none twice, not this rank
  const auto kept = static_cast<std::size_t>(size_) - ranks_to_exclude.size();
  any_communicator survivors = without_gil([&] {
    try {
      return comm().shrink();
    } catch (const error& e) {
      TORCH_CHECK(false, "distcomm: shrink of rank ", rank_, " of ", size_, ": ", e.what());
    }
  });
  TORCH_CHECK(static_cast<std::size_t>(survivors.size()) == kept, "distcomm: shrink keeps ", kept,
              " of ", size_, " ranks, but ", survivors.size(),
              " are alive and took part (a rank not excluded is gone, or an excluded one called "
              "shrink_group)");
  return c10::make_intrusive<process_group>(*this, std::move(survivors));
}

void process_group::shutdown() {
  if (closed_by_ != nullptr) return;
  closed_by_ = "shutdown()";  // refuses what is called from now on
  close();
}

void process_group::abort() {
  if (closed_by_ != nullptr) return;
  closed_by_ = "abort()";
  close();
}

c10d::ErrorType process_group::getError() { return static_cast<c10d::ErrorType>(status_->load()); }
#endif

work_ptr process_group::ran(const host_staging& stage, c10d::OpType type,
                            std::function<void()> call, std::vector<at::Tensor> outputs,
                            std::vector<at::Tensor> inputs, std::function<void()> finish) {
  return ran(type, std::move(call), std::move(outputs), stage.keep(std::move(inputs)),
             stage.after(std::move(finish)));
}

work_ptr process_group::ran(c10d::OpType type, std::function<void()> call,
                            std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
                            std::function<void()> finish) {
  auto done = std::make_shared<completion>(type, std::move(outputs), std::move(inputs),
                                           std::move(finish), status_);
  return queued(done, [done, call = std::move(call)] {
    done->begin();
    std::exception_ptr error;
    try {
      call();
    } catch (...) {
      error = std::current_exception();
    }
    done->end(error);  // its future's callbacks run here, before the next call
  });
}

work_ptr process_group::posted(const host_staging& stage, c10d::OpType type,
                               std::function<distcomm::work()> post,
                               std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
                               std::function<void()> finish) {
  auto done = std::make_shared<completion>(type, std::move(outputs), stage.keep(std::move(inputs)),
                                           stage.after(std::move(finish)), status_);
  return queued(done, [done, post = std::move(post), &order = order_] {
    done->begin();
    try {
      post().then([end = std::make_shared<ending>(ending{order.hold(), done})](
                      std::exception_ptr error) { end->done->end(error); });
    } catch (...) {
      done->end(std::current_exception());
    }
  });
}

work_ptr process_group::queued(const std::shared_ptr<completion>& done,
                               std::function<void()> task) {
  refuse_if(closed_by_ != nullptr);
  // Messages are not collectives: the ranks of a group make different numbers of them.
  if (!c10d::isP2POp(done->type())) count_collective();
  auto w = c10::make_intrusive<collective_work>(rank_, done, order_);
  order_.post(std::move(task));
  return w;
}

c10::intrusive_ptr<c10d::Work> process_group::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  host_staging stage;
  const at::Tensor& t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "distcomm: broadcast rootTensor must be 0");
  const tensor_view v = stage.view(t, "broadcast tensor", true);
  const int root = static_cast<int>(opts.rootRank);
  return ran(
      stage, c10d::OpType::BROADCAST, [this, v, root] { comm().broadcast(v, root); }, tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  host_staging stage;
  const at::Tensor& t = single(tensors, "allreduce");
  if (t.is_sparse()) return sparse_allreduce(t, opts);
  const tensor_view v = stage.view(t, "allreduce tensor", true);
  const reduce_op op = op_of(opts.reduceOp, "allreduce");
  return ran(
      stage, c10d::OpType::ALLREDUCE, [this, v, op] { comm().allreduce(v, op); }, tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  host_staging stage;
  std::vector<tensor_view> views;
  views.reserve(tensors.size());
  for (const at::Tensor& t : tensors)
    views.push_back(stage.view(t, "allreduce_coalesced tensor", true));
  // DistComm's grouped allreduce: one fused collective, each tensor reduced on its own.
  const reduce_op op = op_of(opts.reduceOp, "allreduce_coalesced");
  return ran(
      stage, c10d::OpType::ALLREDUCE_COALESCED,
      [this, views, op] { comm().allreduce(span<const tensor_view>(views), op); }, tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  host_staging stage;
  const at::Tensor& t = single(tensors, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "distcomm: reduce rootTensor must be 0");
  const tensor_view v = stage.view(t, "reduce tensor", true);
  const int root = static_cast<int>(opts.rootRank);
  // In place on the root, as PyTorch's; the other ranks' tensors are left as they were.
  const tensor_view result = rank_ == root ? v : tensor_view{};
  const reduce_op op = op_of(opts.reduceOp, "reduce");
  return ran(
      stage, c10d::OpType::REDUCE,
      [this, v, result, op, root] { comm().reduce(v, result, op, root); }, tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  host_staging stage;
  const at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "distcomm: allgather takes one output list per process");
  check_list(outputs[0], static_cast<std::size_t>(size_), in, "allgather output list");
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  std::vector<at::Tensor> parts = outputs[0];
  const tensor_view in_v = stage.view(in, "allgather input", false);
  const tensor_view out_v = stage.view(flat, "allgather output", true);
  return ran(
      stage, c10d::OpType::ALLGATHER, [this, in_v, out_v] { comm().allgather(in_v, out_v); }, parts,
      {in, flat}, [flat, parts] { unflatten(flat, parts); });
}

work_ptr process_group::allgather_flat(at::Tensor& output, at::Tensor& input,
                                       const c10d::AllgatherOptions&) {
  host_staging stage;
  TORCH_CHECK(output.numel() == input.numel() * size_, "distcomm: _allgather_base output has ",
              output.numel(), " elements; it needs world size × input's = ", input.numel() * size_);
  const tensor_view in_v = stage.view(input, "_allgather_base input", false);
  const tensor_view out_v = stage.view(output, "_allgather_base output", true);
  return ran(stage, c10d::OpType::_ALLGATHER_BASE,
             [this, in_v, out_v] { comm().allgather(in_v, out_v); }, {output}, {input});
}

c10::intrusive_ptr<c10d::Work> process_group::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  host_staging stage;
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(size_),
              "distcomm: allgather_coalesced needs one output list per rank (", size_, "), got ",
              outputs.size());
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(),
                "distcomm: allgather_coalesced output lists must match the input list's length");
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      check_list({list[k]}, 1, inputs[k], "allgather_coalesced output");
    }
  }
  at::Tensor in = inputs.empty() ? at::empty({0}, at::kFloat) : flatten(inputs);
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  std::vector<at::Tensor> parts = flat_list(outputs);
  const tensor_view in_v = stage.view(in, "allgather_coalesced input", false);
  const tensor_view out_v = stage.view(flat, "allgather_coalesced output", true);
  return ran(
      stage, c10d::OpType::ALLGATHER_COALESCED,
      [this, in_v, out_v] { comm().allgather(in_v, out_v); }, parts, {in, flat},
      [flat, parts] { unflatten(flat, parts); });
}

// Every rank's inputs, packed, in one allgather; rank q's block of output i is its input i.
work_ptr process_group::allgather_flat_coalesced(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllgatherOptions&) {
  host_staging stage;
  check_pairs(outputs, inputs, size_, true, "allgather_into_tensor_coalesced");
  at::Tensor in = flatten(inputs);
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  std::vector<at::Tensor> parts = blocks_by_rank(outputs, size_);  // views of the outputs
  const tensor_view in_v = stage.view(in, "allgather_into_tensor_coalesced input", false);
  const tensor_view out_v = stage.view(flat, "allgather_into_tensor_coalesced output", true);
  return ran(
      stage, c10d::OpType::ALLGATHER_COALESCED,
      [this, in_v, out_v] { comm().allgather(in_v, out_v); }, outputs, {in, flat},
      [flat, parts] { unflatten(flat, parts); });
}

// Block q of every input, for every q, packed: one reduce-scatter gives this rank's block of each.
work_ptr process_group::reduce_scatter_flat_coalesced(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::ReduceScatterOptions& opts) {
  host_staging stage;
  check_pairs(outputs, inputs, size_, false, "reduce_scatter_tensor_coalesced");
  at::Tensor packed = flatten(blocks_by_rank(inputs, size_));
  at::Tensor out = at::empty({packed.numel() / size_}, packed.options());
  std::vector<at::Tensor> parts = outputs;
  const tensor_view in_v = stage.view(packed, "reduce_scatter_tensor_coalesced input", false);
  const tensor_view out_v = stage.view(out, "reduce_scatter_tensor_coalesced output", true);
  const reduce_op op = op_of(opts.reduceOp, "reduce_scatter_tensor_coalesced");
  return ran(
      stage, c10d::OpType::REDUCE_SCATTER,
      [this, in_v, out_v, op] { comm().reduce_scatter(in_v, out_v, op); }, outputs, {packed, out},
      [out, parts] { unflatten(out, parts); });
}

c10::intrusive_ptr<c10d::Work> process_group::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  host_staging stage;
  const at::Tensor& in = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ != root) {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "distcomm: gather takes output tensors on the root rank only");
    const tensor_view in_v = stage.view(in, "gather input", false);
    return ran(stage, c10d::OpType::GATHER,
               [this, in_v, root] { comm().gather(in_v, tensor_view{}, root); }, {}, {in});
  }
  TORCH_CHECK(outputs.size() == 1, "distcomm: gather takes one output list on the root");
  check_list(outputs[0], static_cast<std::size_t>(size_), in, "gather output list");
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  std::vector<at::Tensor> parts = outputs[0];
  const tensor_view in_v = stage.view(in, "gather input", false);
  const tensor_view out_v = stage.view(flat, "gather output", true);
  return ran(
      stage, c10d::OpType::GATHER, [this, in_v, out_v, root] { comm().gather(in_v, out_v, root); },
      parts, {in, flat}, [flat, parts] { unflatten(flat, parts); });
}

// Every rank's input into the root's one tensor, in rank order (torch 2.14's gather_single).
work_ptr process_group::gather_flat(at::Tensor& output, at::Tensor& input,
                                    const c10d::GatherOptions& opts) {
  host_staging stage;
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ != root) {
    const tensor_view in_v = stage.view(input, "gather_single input", false);
    return ran(stage, c10d::OpType::GATHER,
               [this, in_v, root] { comm().gather(in_v, tensor_view{}, root); }, {}, {input});
  }
  TORCH_CHECK(output.numel() == input.numel() * size_, "distcomm: gather_single output has ",
              output.numel(), " elements; it needs world size × input's = ", input.numel() * size_);
  const tensor_view in_v = stage.view(input, "gather_single input", false);
  const tensor_view out_v = stage.view(output, "gather_single output", true);
  return ran(stage, c10d::OpType::GATHER,
             [this, in_v, out_v, root] { comm().gather(in_v, out_v, root); }, {output}, {input});
}

c10::intrusive_ptr<c10d::Work> process_group::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  host_staging stage;
  const at::Tensor& out = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "distcomm: scatter takes one input list on the root");
    check_list(inputs[0], static_cast<std::size_t>(size_), out, "scatter input list");
    flat = flatten(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "distcomm: scatter takes input tensors on the root rank only");
  }
  const tensor_view in = flat.defined() ? stage.view(flat, "scatter input", false) : tensor_view{};
  const tensor_view out_v = stage.view(out, "scatter output", true);
  return ran(stage, c10d::OpType::SCATTER,
             [this, in, out_v, root] { comm().scatter(in, out_v, root); }, outputs, {flat});
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  host_staging stage;
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "distcomm: reduce_scatter takes one input list per process");
  check_list(inputs[0], static_cast<std::size_t>(size_), out, "reduce_scatter input list");
  at::Tensor flat = flatten(inputs[0]);
  const tensor_view in_v = stage.view(flat, "reduce_scatter input", false);
  const tensor_view out_v = stage.view(out, "reduce_scatter output", true);
  const reduce_op op = op_of(opts.reduceOp, "reduce_scatter");
  return ran(stage, c10d::OpType::REDUCE_SCATTER,
             [this, in_v, out_v, op] { comm().reduce_scatter(in_v, out_v, op); }, outputs, {flat});
}

work_ptr process_group::reduce_scatter_flat(at::Tensor& output, at::Tensor& input,
                                            const c10d::ReduceScatterOptions& opts) {
  host_staging stage;
  TORCH_CHECK(input.numel() == output.numel() * size_, "distcomm: _reduce_scatter_base input has ",
              input.numel(),
              " elements; it needs world size × output's = ", output.numel() * size_);
  const tensor_view in_v = stage.view(input, "_reduce_scatter_base input", false);
  const tensor_view out_v = stage.view(output, "_reduce_scatter_base output", true);
  const reduce_op op = op_of(opts.reduceOp, "_reduce_scatter_base");
  return ran(stage, c10d::OpType::_REDUCE_SCATTER_BASE,
             [this, in_v, out_v, op] { comm().reduce_scatter(in_v, out_v, op); }, {output},
             {input});
}

work_ptr process_group::alltoall_flat(at::Tensor& output, at::Tensor& input,
                                      std::vector<int64_t>& output_split_sizes,
                                      std::vector<int64_t>& input_split_sizes,
                                      const c10d::AllToAllOptions&) {
  host_staging stage;
  const tensor_view in = stage.view(input, "alltoall_base input", false);
  const tensor_view out = stage.view(output, "alltoall_base output", true);
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    return ran(stage, c10d::OpType::ALLTOALL_BASE, [this, in, out] { comm().alltoall(in, out); },
               {output}, {input});
  }
  // Split sizes count rows (the first dimension); DistComm counts elements.
  const auto counts = [&](const std::vector<int64_t>& splits, const at::Tensor& t,
                          const char* what) {
    const std::int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    const std::int64_t row = rows > 0 ? t.numel() / rows : 0;
    std::vector<std::size_t> c(static_cast<std::size_t>(size_));
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "distcomm: alltoall_base ", what, " has ", rows,
                  " rows, not a multiple of the world size ", size_, ", and no split sizes");
      for (auto& x : c) x = static_cast<std::size_t>(rows / size_ * row);
      return c;
    }
    TORCH_CHECK(splits.size() == static_cast<std::size_t>(size_), "distcomm: alltoall_base ", what,
                " split sizes has ", splits.size(), " entries; it needs one per rank (", size_,
                ")");
    std::int64_t total = 0;
    for (std::size_t q = 0; q < c.size(); ++q) {
      TORCH_CHECK(splits[q] >= 0, "distcomm: alltoall_base ", what, " split size ", splits[q],
                  " is negative");
      total += splits[q];
      c[q] = static_cast<std::size_t>(splits[q] * row);
    }
    TORCH_CHECK(total == rows, "distcomm: alltoall_base ", what, " split sizes add up to ", total,
                " rows; the tensor has ", rows);
    return c;
  };
  // The communicator copies the counts: they need not outlive the call.
  const std::vector<std::size_t> send = counts(input_split_sizes, input, "input");
  const std::vector<std::size_t> recv = counts(output_split_sizes, output, "output");
  return ran(stage, c10d::OpType::ALLTOALL_BASE,
             [this, in, send, out, recv] {
               comm().alltoallv(in, span<const std::size_t>(send), out,
                                span<const std::size_t>(recv));
             },
             {output}, {input});
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions&) {
  host_staging stage;
  TORCH_CHECK(inputs.size() == static_cast<std::size_t>(size_) && outputs.size() == inputs.size(),
              "distcomm: alltoall takes one input and one output tensor per rank (", size_,
              "), got ", inputs.size(), " and ", outputs.size());
  std::vector<std::size_t> send, recv;
  for (std::size_t q = 0; q < inputs.size(); ++q) {
    TORCH_CHECK(inputs[q].scalar_type() == inputs[0].scalar_type() &&
                    outputs[q].scalar_type() == inputs[0].scalar_type(),
                "distcomm: alltoall tensors must share one dtype");
    send.push_back(static_cast<std::size_t>(inputs[q].numel()));
    recv.push_back(static_cast<std::size_t>(outputs[q].numel()));
  }
  at::Tensor in = flatten(inputs);
  std::int64_t total = 0;
  for (const at::Tensor& o : outputs) total += o.numel();
  at::Tensor flat = at::empty({total}, inputs[0].options());  // overwritten: no copy of outputs
  std::vector<at::Tensor> parts = outputs;
  const tensor_view in_v = stage.view(in, "alltoall input", false);
  const tensor_view out_v = stage.view(flat, "alltoall output", true);
  return ran(
      stage, c10d::OpType::ALLTOALL,
      [this, in_v, send, out_v, recv] {
        comm().alltoallv(in_v, span<const std::size_t>(send), out_v, span<const std::size_t>(recv));
      },
      parts, {in, flat}, [flat, parts] { unflatten(flat, parts); });
}

c10::intrusive_ptr<c10d::Work> process_group::send(std::vector<at::Tensor>& tensors, int dst,
                                                   int tag) {
  host_staging stage;
  const at::Tensor& t = single(tensors, "send");
  const tensor_view v = stage.view(t, "send tensor", false);
  return posted(
      stage, c10d::OpType::SEND, [this, v, dst, tag] { return comm().isend(v, dst, tag); },
      tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::recv(std::vector<at::Tensor>& tensors, int src,
                                                   int tag) {
  host_staging stage;
  const at::Tensor& t = single(tensors, "recv");
  const tensor_view v = stage.view(t, "recv tensor", true);
  return posted(
      stage, c10d::OpType::RECV, [this, v, src, tag] { return comm().irecv(v, src, tag); },
      tensors);
}

// The sender's rank lives as long as the receive may write it (the copy-out holds it) and as the
// work that reports it.
c10::intrusive_ptr<c10d::Work> process_group::recvAnysource(std::vector<at::Tensor>& tensors,
                                                            int tag) {
  host_staging stage;
  const at::Tensor& t = single(tensors, "recv");
  auto source = std::make_shared<int>(-1);
  const tensor_view v = stage.view(t, "recv tensor", true);
  int* sender = source.get();
  auto w = posted(
      stage, c10d::OpType::RECVANYSOURCE,
      [this, v, sender, tag] { return comm().irecv_any(v, sender, tag); }, tensors, {},
      [source] {});
  static_cast<collective_work&>(*w).receives_from_any(std::move(source));
  return w;
}

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions&) {
  return ran(c10d::OpType::BARRIER, [this] { comm().barrier(); }, {});
}

}  // namespace distcomm::torch_binding
