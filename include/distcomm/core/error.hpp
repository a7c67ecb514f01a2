// The DistComm error hierarchy. Every failure the library reports is a distcomm::error (itself a
// std::runtime_error); the subclass says what kind of failure it was so callers can react
// (retry on timeout, re-initialise on peer loss, fix the call on invalid_argument / mismatch).
#pragma once

#include <stdexcept>
#include <string>

namespace distcomm {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A call was made with arguments that can never work (null data, root out of range, ...).
class invalid_argument_error : public error {
 public:
  using error::error;
};

// A wait passed its deadline (DISTCOMM_TIMEOUT). The message names the operation and the peer.
class timeout_error : public error {
 public:
  using error::error;
};

// A peer died, closed its connection or aborted the job.
class peer_lost_error : public error {
 public:
  using error::error;
};

// Ranks disagree about a collective (different sizes, dtypes, ops or roots).
class mismatch_error : public error {
 public:
  using error::error;
};

// This rank was presumed dead: the other ranks shrank their communicator without it
// (communicator::shrink) while it was stopped, hung or too slow. It must not rejoin them.
class excluded_error : public error {
 public:
  using error::error;
};

// The environment does not describe a usable world (bad RANK, missing master, ...).
class rendezvous_error : public error {
 public:
  using error::error;
};

// A transport library reported a failure; carries which backend, which routine and its code.
class backend_error : public error {
 public:
  backend_error(std::string backend, std::string routine, long code, const std::string& what)
      : error(backend + ": " + routine + " failed (code " + std::to_string(code) + "): " + what),
        backend_(std::move(backend)),
        routine_(std::move(routine)),
        code_(code) {}

  const std::string& backend() const noexcept { return backend_; }
  const std::string& routine() const noexcept { return routine_; }
  long code() const noexcept { return code_; }

 private:
  std::string backend_;
  std::string routine_;
  long code_;
};

}  // namespace distcomm
