// Users' point-to-point tags over a real MPI, under mpirun with 2 ranks: on the MPI_TAG_UB this MPI
// reports, and on the standard's minimum, 32767, which this program reports itself through MPI's
// profiling interface (its MPI_Comm_get_attr answers MPI_TAG_UB and hands every other question to
// PMPI_Comm_get_attr). Each value arrives on the tag it was sent with, the tag on the wire is
// inside the bound, and a tag that cannot be mapped is refused on both ranks before anything is
// posted. The mapping itself, tag by tag: tests/unit/test_mpi_tags.cpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/strategy/ring.hpp"

using namespace distcomm;

namespace {
int reported_tag_ub = 0;  // MPI_TAG_UB as MPI_Comm_get_attr answers it; 0: as the library does
}  // namespace

extern "C" int MPI_Comm_get_attr(MPI_Comm comm, int keyval, void* value, int* flag) {
  if (keyval == MPI_TAG_UB && reported_tag_ub != 0) {
    *static_cast<int**>(value) = &reported_tag_ub;
    *flag = 1;
    return MPI_SUCCESS;
  }
  return PMPI_Comm_get_attr(comm, keyval, value, flag);
}

namespace {

using mpi_communicator = communicator<mpi_backend, strategy::ring>;

// Backends made while one is alive see MPI_TAG_UB `ub`.
struct reporting_tag_ub {
  explicit reporting_tag_ub(int ub) { reported_tag_ub = ub; }
  ~reporting_tag_ub() { reported_tag_ub = 0; }
  reporting_tag_ub(const reporting_tag_ub&) = delete;
  reporting_tag_ub& operator=(const reporting_tag_ub&) = delete;
};

mpi_communicator make_communicator() {
  config c;
  c.timeout = std::chrono::seconds(30);
  return mpi_communicator(mpi_backend(MPI_COMM_WORLD, mpi_backend::duplicate), c);
}

int library_tag_ub() {
  int* ub = nullptr;
  int flag = 0;
  PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  return flag != 0 && ub != nullptr ? *ub : 32767;
}

std::int64_t value_for(int tag) { return 1000 + static_cast<std::int64_t>(tag); }

// Rank 0 sends one value on each of `tags`; rank 1 receives them last tag first, so each value
// must find the receive of its own tag. Before receiving, rank 1 probes the first message as MPI
// sees it: its MPI tag must be `first_on_wire`, inside MPI_TAG_UB `ub`.
void send_on_tags(mpi_communicator& comm, const std::vector<int>& tags, int first_on_wire, int ub) {
  std::vector<std::int64_t> v(tags.size());
  if (comm.rank() == 0) {
    std::vector<work> sent;
    for (std::size_t i = 0; i < tags.size(); ++i) {
      v[i] = value_for(tags[i]);
      sent.push_back(comm.isend(view(&v[i], 1), 1, tags[i]));
    }
    for (work& w : sent) w.wait();
  } else if (comm.rank() == 1) {
    MPI_Status st;
    REQUIRE(MPI_Probe(0, MPI_ANY_TAG, comm.backend().comm(), &st) == MPI_SUCCESS);
    CHECK(st.MPI_TAG == first_on_wire);
    CHECK(st.MPI_TAG <= ub);
    for (std::size_t i = tags.size(); i-- > 0;) {
      comm.recv(view(&v[i], 1), 0, tags[i]);
      CAPTURE(tags[i]);
      CHECK(v[i] == value_for(tags[i]));
    }
  }
}

std::string refusal(mpi_communicator& comm, int tag) {
  std::int64_t v = 0;
  try {
    if (comm.rank() == 0) comm.send(view(&v, 1), 1, tag);
    if (comm.rank() == 1) comm.recv(view(&v, 1), 0, tag);
  } catch (const invalid_argument_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("user tags on the MPI_TAG_UB this MPI reports arrive on their tags") {
  const int ub = library_tag_ub();
  MESSAGE("this MPI reports MPI_TAG_UB " << ub);
  mpi_communicator comm = make_communicator();
  REQUIRE(comm.size() >= 2);
  // Open MPI reaches 2^31 - 1: tags travel as they are; a smaller bound splits the range.
  const int first_on_wire = ub == INT_MAX ? static_cast<int>(user_tag_base) : 1024;
  const int largest = static_cast<int>(user_tag_base) - 1;  // the largest tag a caller may give
  send_on_tags(comm, {0, 7, ub == INT_MAX ? largest : std::min(largest, ub - 1024)}, first_on_wire,
               ub);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("user tags under MPI_TAG_UB 32767 arrive on their tags, inside the bound") {
  const reporting_tag_ub small(32767);
  mpi_communicator comm = make_communicator();
  REQUIRE(comm.size() >= 2);
  // 0 is the first user tag, 31743 the last one that fits (32767 - the 1024 kept for DistComm's).
  send_on_tags(comm, {0, 7, 31743}, 1024, 32767);

  // The collectives' own tags (the ring's, the mismatch check's) fit too.
  std::vector<std::int64_t> sum(1000, comm.rank() + 1);
  comm.allreduce(view(sum));
  const std::int64_t p = comm.size();
  CHECK(sum.front() == p * (p + 1) / 2);
  CHECK(sum.back() == p * (p + 1) / 2);

  // A tag beyond the range is refused on the sender and on the receiver, naming the tag, the
  // bound and the range; nothing reached MPI, and the communicator goes on working.
  for (const int tag : {31744, static_cast<int>(user_tag_base) - 1}) {
    const std::string e = refusal(comm, tag);
    if (comm.rank() > 1) continue;
    CAPTURE(e);
    CHECK(e.find("user tag " + std::to_string(tag) + " cannot be sent") != std::string::npos);
    CHECK(e.find("MPI_TAG_UB 32767") != std::string::npos);
    CHECK(e.find("user tags 0 to 31743") != std::string::npos);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm.rank() == 1) {
    int pending = 1;
    MPI_Status st;
    MPI_Iprobe(0, MPI_ANY_TAG, comm.backend().comm(), &pending, &st);
    CAPTURE(st.MPI_TAG);
    CHECK(pending == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 sends again only once rank 1 has looked
  if (comm.rank() < 2) {
    const int peer = 1 - comm.rank();
    std::int64_t out = value_for(comm.rank()), in = -1;
    comm.sendrecv(view(&out, 1), peer, view(&in, 1), peer, 31743);
    CHECK(in == value_for(peer));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  // MPI_THREAD_MULTIPLE: the test probes the communicator's MPI_Comm beside its progress thread.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 1;
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "test_mpi_tags: this MPI does not provide MPI_THREAD_MULTIPLE\n");
  } else {
    doctest::Context ctx(argc, argv);  // every rank reports its own failures
    rc = ctx.run();
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
