// Allreduce of a sparse COO tensor, as gloo does it: every rank's coalesced indices and values
// are gathered (padded to the largest count, which the ranks learn first), and coalescing their
// concatenation sums the entries that share an index. SUM only, as gloo's; the result replaces
// the tensor's contents in place, as PyTorch's suite expects.
#include <cstdint>
#include <memory>
#include <vector>

#include "process_group.hpp"
#include "tensors.hpp"

namespace distcomm::torch_binding {

c10::intrusive_ptr<c10d::Work> process_group::sparse_allreduce(const at::Tensor& t,
                                                               const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM,
              "distcomm: allreduce of a sparse tensor sums only (as gloo's does); densify it "
              "(tensor.to_dense()) for other reductions");
  TORCH_CHECK(t.device().is_cpu(), "distcomm: allreduce of a sparse tensor on ", t.device(),
              "; sparse tensors are reduced on the CPU");
  const at::Tensor mine = t.coalesce();
  const at::Tensor indices = mine._indices().contiguous();  // sparse_dim x nnz, int64
  const at::Tensor values = mine._values().contiguous();    // nnz x dense dimensions
  // What the three gathers leave for the copy-out, which runs after them.
  struct gathered {
    at::Tensor counts, all_indices, all_values;
  };
  auto got = std::make_shared<gathered>();
  const int ranks = size_;
  const auto call = [this, indices, values, got, ranks] {
    // How many entries each rank has: the padding every rank uses alike.
    const std::int64_t nnz = indices.size(1);
    at::Tensor count = at::full({1}, nnz, at::kLong);
    got->counts = at::empty({ranks}, at::kLong);
    comm().allgather(view_of(count, "sparse allreduce count"),
                     view_of(got->counts, "sparse counts"));
    const std::int64_t most = got->counts.max().item<std::int64_t>();
    if (most == 0) return;
    const std::int64_t sparse_dims = indices.size(0);
    at::Tensor my_indices = at::zeros({sparse_dims, most}, at::kLong);
    my_indices.narrow(1, 0, nnz).copy_(indices);
    std::vector<std::int64_t> shape = values.sizes().vec();
    shape[0] = most;
    at::Tensor my_values = at::zeros(shape, values.options());
    my_values.narrow(0, 0, nnz).copy_(values);
    got->all_indices = at::empty({ranks, sparse_dims, most}, at::kLong);
    comm().allgather(view_of(my_indices, "sparse allreduce indices"),
                     view_of(got->all_indices, "sparse allreduce indices"));
    shape.insert(shape.begin(), ranks);
    got->all_values = at::empty(shape, values.options());
    comm().allgather(view_of(my_values, "sparse allreduce values"),
                     view_of(got->all_values, "sparse allreduce values"));
  };
  return ran(c10d::OpType::ALLREDUCE, call, {t}, {indices, values}, [t, got, ranks]() mutable {
    if (!got->all_values.defined()) return;  // no rank had an entry
    std::vector<at::Tensor> i;
    std::vector<at::Tensor> v;
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t n = got->counts[r].item<std::int64_t>();
      i.push_back(got->all_indices[r].narrow(1, 0, n));
      v.push_back(got->all_values[r].narrow(0, 0, n));
    }
    t.copy_(at::sparse_coo_tensor(at::cat(i, 1), at::cat(v, 0), t.sizes()).coalesce());
  });
}

}  // namespace distcomm::torch_binding
