// distcomm_torch._C: the process group's constructor for torch.distributed
// (python/distcomm_torch/__init__.py registers it as the backend "distcomm").
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <string>
#include <vector>

#include "call_order.hpp"
#include "process_group.hpp"
#include "torch_flight_recorder.hpp"

namespace py = pybind11;
using distcomm::torch_binding::process_group;

namespace {

// What the creator Backend.register_backend calls passes on (python/distcomm_torch/__init__.py):
// the group's store, rank, size and timeout, and torch's name of the group and the global ranks
// of its members. Connecting waits for the other ranks, so the GIL is released meanwhile.
c10::intrusive_ptr<distcomm::torch_binding::torch_backend_base> create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const std::chrono::duration<float>& timeout, const std::string& group_name,
    const std::vector<int>& global_ranks) {
  py::gil_scoped_release release;
  return c10::make_intrusive<process_group>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
      distcomm::torch_binding::torch_group{group_name, global_ranks});
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "DistComm's torch.distributed backend (import distcomm_torch registers \"distcomm\")";
  // The class is registered so that Python sees the group's type and its transport; its base,
  // torch's ProcessGroup (1.13) or Backend (2.x), is torch's own.
  py::module_::import("torch.distributed");
  py::class_<process_group, distcomm::torch_binding::torch_backend_base,
             c10::intrusive_ptr<process_group>>(m, "ProcessGroupDistComm")
      .def_property_readonly("transport", &process_group::transport,
                             "the DistComm backend and strategy under the group, e.g. 'gloo/auto'")
      // What torch 2.x calls on the default group's backend, on the ranks outside a group that
      // new_group makes while a device is bound (init_process_group(device_id=...)): a split
      // with no color, for backends whose split involves every rank of the parent (NCCL's). The
      // members of a "distcomm" group connect anew among themselves: nothing to do.
      .def(
          "perform_nocolor_split", [](process_group&, const py::object&) {}, py::arg("device"))
      // FSDP's coalesced forms, which torch 2.1 and later call through the group themselves;
      // here for torch versions that have none (1.13).
      .def(
          "allgather_into_tensor_coalesced",
          [](process_group& g, std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs) {
            return g.allgather_flat_coalesced(outputs, inputs, c10d::AllgatherOptions());
          },
          py::arg("outputs"), py::arg("inputs"), py::call_guard<py::gil_scoped_release>())
      .def(
          "reduce_scatter_tensor_coalesced",
          [](process_group& g, std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs) {
            return g.reduce_scatter_flat_coalesced(outputs, inputs, c10d::ReduceScatterOptions());
          },
          py::arg("outputs"), py::arg("inputs"), py::call_guard<py::gil_scoped_release>());
  m.def("create_process_group", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::arg("group_name") = std::string(),
        py::arg("global_ranks") = std::vector<int>(),
        "The process group of rank `rank` of `size`, connected through `store` within `timeout`; "
        "its flight recorder named `group_name` (torch's name of the group) with the members' "
        "`global_ranks`");
  distcomm::torch_binding::add_torch_flight_recorder_format();
  m.attr("TORCH_FLIGHT_RECORDER_PREFIX") = distcomm::torch_binding::torch_flight_recorder_format();
  m.def("backend_for", &distcomm::torch_binding::backend_for, py::arg("size"),
        py::arg("one_host") = true,
        "The DistComm backend a group of `size` ranks (all on one host, or not) gets when "
        "DISTCOMM_BACKEND names none");
  m.def("_settle_at_exit", &distcomm::torch_binding::call_order::settle_all,
        py::call_guard<py::gil_scoped_release>(),
        "Waits until the calls of every group have ended (call_order.hpp): the package runs it at "
        "the interpreter's exit, before Python finalizes");
  m.attr("__version__") = DISTCOMM_TORCH_VERSION;
}
