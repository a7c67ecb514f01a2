// PyTorch's flight-recorder format for DistComm's dumps: where the torch built against has its
// flight recorder (torch/csrc/distributed/c10d/FlightRecorder.hpp: 2.11 and 2.15, not 1.13; and the
// analyzer `python -m torch.distributed.flight_recorder.fr_trace DIR`), every dump DistComm
// writes into DISTCOMM_DUMP_DIR (trace/flight_recorder.hpp: on a failed collective, SIGUSR1, or
// on request) also writes DIR/distcomm_torch_fr_<global rank> in torch's pickled form, from the
// same records: torch's analyzer reads the job's files and names, for a collective some ranks
// entered, the ranks that did not. DistComm's own JSON file and distcomm-trace stay as they are.
#pragma once

namespace distcomm::torch_binding {

// Adds the format to every dump of this process (once; the module does it as it loads). Nothing
// where the torch built against has no flight recorder.
void add_torch_flight_recorder_format();

// What the entries' names ("profiling_name") begin with: "distcomm:" ("distcomm:all_reduce"),
// or "nccl:" where torch's analyzer reads no other (before 2.15: torch_api.hpp); "" where the
// format is not written (the torch built against has no flight recorder).
const char* torch_flight_recorder_format();

}  // namespace distcomm::torch_binding
