// --peer mpi: MPI_Allreduce(MPI_IN_PLACE, ...) on MPI_COMM_WORLD.
#include <mpi.h>

#include <climits>
#include <string>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "peer.hpp"

namespace distcomm::bench {

namespace {

MPI_Datatype mpi_type(dtype t) {
  switch (t) {
    case dtype::f32:
      return MPI_FLOAT;
    case dtype::f64:
      return MPI_DOUBLE;
    case dtype::i8:
      return MPI_INT8_T;
    case dtype::u8:
      return MPI_UINT8_T;
    case dtype::i32:
      return MPI_INT32_T;
    case dtype::i64:
      return MPI_INT64_T;
    case dtype::f16:
    case dtype::bf16:
      break;
  }
  throw invalid_argument_error(std::string("--peer mpi: MPI has no ") + to_string(t) + " type");
}

MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return MPI_SUM;
    case reduce_op::prod:
      return MPI_PROD;
    case reduce_op::min:
      return MPI_MIN;
    case reduce_op::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

void check(int rc, const char* routine) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw backend_error("mpi", routine, rc, text);
}

class mpi_peer final : public peer {
 public:
  explicit mpi_peer(const peer_world& w) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // As a program that only calls MPI would start it: MPI_Init, whose thread level is the
      // library's default (Open MPI: MPI_THREAD_SINGLE). Only this thread calls MPI here. A level
      // above it turns on Open MPI's locks: an 8-byte MPI_Allreduce between 2 processes took 0.24
      // us at MPI_THREAD_SERIALIZED against 0.14-0.15 at MPI_THREAD_SINGLE, 4 KiB 1.0 against 0.69,
      // equal from 32 KiB (docs/PERFORMANCE.md, "MPI's thread level"). Under the mpi backend MPI
      // is already initialized, at MPI_THREAD_SERIALIZED, and this peer shares it.
      check(MPI_Init(nullptr, nullptr), "MPI_Init");
      finalize_ = true;
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != w.rank || size != w.size) {
      throw invalid_argument_error("--peer mpi: MPI_COMM_WORLD says rank " + std::to_string(rank) +
                                   " of " + std::to_string(size) + " but this job's rank is " +
                                   std::to_string(w.rank) + " of " + std::to_string(w.size) +
                                   "; start every rank with one mpirun");
    }
    size_ = size;
  }
  ~mpi_peer() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalize_ && !finalized) MPI_Finalize();
  }

  void allreduce(void* data, std::size_t count, dtype t, reduce_op op) override {
    if (count > static_cast<std::size_t>(INT_MAX)) {
      throw invalid_argument_error("--peer mpi: " + std::to_string(count) +
                                   " elements exceed MPI's int count");
    }
    check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(t), mpi_op(op),
                        MPI_COMM_WORLD),
          "MPI_Allreduce");
    if (op == reduce_op::avg) divide(data, data, count, t, static_cast<std::size_t>(size_));
  }

  void alltoall(const void* in, void* out, std::size_t block, dtype t) override {
    if (block * static_cast<std::size_t>(size_) > static_cast<std::size_t>(INT_MAX)) {
      throw invalid_argument_error("--peer mpi: " + std::to_string(block) +
                                   " elements per rank exceed MPI's int count");
    }
    check(MPI_Alltoall(in, static_cast<int>(block), mpi_type(t), out, static_cast<int>(block),
                       mpi_type(t), MPI_COMM_WORLD),
          "MPI_Alltoall");
  }

  void alltoallv(const void* in, const int* send_counts, const int* send_displs, void* out,
                 const int* recv_counts, const int* recv_displs, dtype t) override {
    check(MPI_Alltoallv(in, send_counts, send_displs, mpi_type(t), out, recv_counts, recv_displs,
                        mpi_type(t), MPI_COMM_WORLD),
          "MPI_Alltoallv");
  }

  std::string description() const override {
    return "MPI_Allreduce / MPI_Alltoall(v) on MPI_COMM_WORLD";
  }

 private:
  bool finalize_ = false;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<peer> make_mpi_peer(const peer_world& w) { return std::make_unique<mpi_peer>(w); }

}  // namespace distcomm::bench
