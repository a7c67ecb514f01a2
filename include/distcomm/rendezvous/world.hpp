// world_info: who this process is in the job (rank, size, local rank, node, master address) as
// the launcher described it. detect_world() reads the environment of every launcher DistComm
// knows (DistComm's own, torchrun-style, Open MPI, MPICH/Hydra, Slurm, TF_CONFIG), first match
// wins, then applies the DISTCOMM_* overrides; an environment that cannot describe a usable world
// raises rendezvous_error naming the variable, its value and what to do.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace distcomm {

enum class launcher_kind {
  distcomm,   // DISTCOMM_RANK / DISTCOMM_WORLD_SIZE (distcomm-run, or set by hand)
  torchrun,   // RANK / WORLD_SIZE: torchrun, Kubeflow PyTorchJob, AzureML PyTorch
  open_mpi,   // OMPI_COMM_WORLD_*: mpirun, AzureML MPI jobs, MPI Operator
  mpich,      // PMI_RANK / PMI_SIZE (Hydra: MPICH, Intel MPI), or PMIX_RANK
  slurm,      // SLURM_PROCID / SLURM_NTASKS: srun
  tf_config,  // TF_CONFIG JSON: TFJob, AzureML TensorFlow
  none,       // nothing found: a single process, rank 0 of 1
};

const char* to_string(launcher_kind k) noexcept;

// True for the launchers that start MPI ranks (mpirun, mpiexec, srun): only their ranks share an
// MPI_COMM_WORLD; any other launcher's processes each get a world of their own from MPI_Init.
inline bool started_by_mpi(launcher_kind k) noexcept {
  return k == launcher_kind::open_mpi || k == launcher_kind::mpich || k == launcher_kind::slurm;
}

struct world_info {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  // Ranks on this node; local_rank + 1 (a lower bound) when the launcher gave only a local rank.
  int local_size = 1;
  int node_rank = 0;  // index of this node; 0 when the launcher does not say (Open MPI, Hydra)
  std::string master_addr;  // empty when the launcher named none
  int master_port = 0;      // 0 when the launcher named none
  launcher_kind launcher = launcher_kind::none;
  // Parameter-server ranks named by the launcher (TF_CONFIG `ps` tasks), else 0.
  int ps_servers = 0;
  // master_addr is 127.0.0.1 because no launcher named a master and every rank is on this node.
  bool loopback_master = false;

  // Every rank runs on this node (so loopback can serve as the master address).
  bool single_node() const noexcept { return local_size == size; }
  // One line: `rank 3/8 (local 1/4, node 1) master 10.0.0.1:29500 from torchrun`.
  std::string to_string() const;
};

using env_lookup = std::function<const char*(const char*)>;

// Reads the process environment. docs/RENDEZVOUS.md lists every variable, rule and error.
world_info detect_world();
// Same, from any lookup (tests inject environments this way).
world_info detect_world(const env_lookup& getenv);

// Throws rendezvous_error unless w names a master address and port, saying which variables to set
// for w's launcher. Call it before bootstrapping a multi-rank world through a TCP store.
void require_master(const world_info& w);

// Expands a Slurm compressed host list such as `node[01-04,07],gpu-[1-2]` in order, keeping zero
// padding; several bracket groups in one name expand as a product. A malformed list, or one of
// more than max_hosts names, raises rendezvous_error.
std::vector<std::string> expand_hostlist(const std::string& list,
                                         std::size_t max_hosts = std::size_t{1} << 20);
// The first name of such a list; the whole list is still checked, but not expanded.
std::string first_host(const std::string& list);

}  // namespace distcomm
