// C++ helpers shared by both sides of the plugin ABI (distcomm_backend_v1.h): the host's loader
// and adapter, and a plugin built with export.hpp. Deadlines to and from CLOCK_MONOTONIC
// nanoseconds, DistComm's exceptions to and from status codes plus error text.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "distcomm/backend.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/distcomm_backend_traits_v1.h"
#include "distcomm/distcomm_backend_v1.h"
#include "distcomm/log.hpp"

namespace distcomm::plugin {

// The C codes are DistComm's enumerators, so values cross the boundary unchanged.
static_assert(DISTCOMM_V1_F16 == static_cast<int>(dtype::f16) &&
              DISTCOMM_V1_BF16 == static_cast<int>(dtype::bf16) &&
              DISTCOMM_V1_F32 == static_cast<int>(dtype::f32) &&
              DISTCOMM_V1_F64 == static_cast<int>(dtype::f64) &&
              DISTCOMM_V1_I8 == static_cast<int>(dtype::i8) &&
              DISTCOMM_V1_U8 == static_cast<int>(dtype::u8) &&
              DISTCOMM_V1_I32 == static_cast<int>(dtype::i32) &&
              DISTCOMM_V1_I64 == static_cast<int>(dtype::i64));
static_assert(DISTCOMM_V1_SUM == static_cast<int>(reduce_op::sum) &&
              DISTCOMM_V1_AVG == static_cast<int>(reduce_op::avg) &&
              DISTCOMM_V1_MIN == static_cast<int>(reduce_op::min) &&
              DISTCOMM_V1_MAX == static_cast<int>(reduce_op::max) &&
              DISTCOMM_V1_PROD == static_cast<int>(reduce_op::prod));
static_assert(DISTCOMM_V1_CAN_PROCESSES == static_cast<std::uint32_t>(capability::processes) &&
                  DISTCOMM_V1_CAN_STORE == static_cast<std::uint32_t>(capability::store) &&
                  DISTCOMM_V1_CAN_MPI_WORLD == static_cast<std::uint32_t>(capability::mpi_world) &&
                  DISTCOMM_V1_CAN_SINGLE_HOST ==
                      static_cast<std::uint32_t>(capability::single_host) &&
                  DISTCOMM_V1_CAN_SPLIT == static_cast<std::uint32_t>(capability::split) &&
                  DISTCOMM_V1_CAN_SHRINK == static_cast<std::uint32_t>(capability::shrink) &&
                  DISTCOMM_V1_CAN_GROW == static_cast<std::uint32_t>(capability::grow),
              "the plugin ABI's capability bits are distcomm::capability's");
static_assert(DISTCOMM_V1_LOG_ERROR == static_cast<int>(log_level::error) &&
              DISTCOMM_V1_LOG_DEBUG == static_cast<int>(log_level::debug));
// steady_clock counts CLOCK_MONOTONIC nanoseconds on Linux, the ABI's deadline clock.
static_assert(std::is_same_v<clock::duration, std::chrono::nanoseconds>,
              "the plugin ABI's deadlines are CLOCK_MONOTONIC nanoseconds");

inline std::int64_t to_ns(deadline d) noexcept {
  if (d == deadline::max()) return DISTCOMM_V1_NO_DEADLINE;
  return static_cast<std::int64_t>(d.time_since_epoch().count());
}

inline deadline from_ns(std::int64_t ns) noexcept {
  if (ns == DISTCOMM_V1_NO_DEADLINE) return deadline::max();
  return deadline(clock::duration(ns));
}

// A caller's error buffer, empty. Only its first byte is written: a distcomm_error_v1 is 1 KiB,
// too much to clear on every test() and wait() of a request.
struct error_buffer : distcomm_error_v1 {
  error_buffer() noexcept { text[0] = '\0'; }
};

// The text a plugin left in `err`, bounded by the buffer even when it was not terminated.
inline std::string error_text(const distcomm_error_v1& err) {
  return std::string(err.text, strnlen(err.text, sizeof err.text));
}

inline void set_error(distcomm_error_v1* err, const std::string& text) noexcept {
  if (err != nullptr) std::snprintf(err->text, sizeof err->text, "%s", text.c_str());
}

inline const char* status_name(int status) noexcept {
  switch (status) {
    case DISTCOMM_V1_OK:
      return "OK";
    case DISTCOMM_V1_PENDING:
      return "PENDING";
    case DISTCOMM_V1_TIMEOUT:
      return "TIMEOUT";
    case DISTCOMM_V1_MISMATCH:
      return "MISMATCH";
    case DISTCOMM_V1_PEER_LOST:
      return "PEER_LOST";
    case DISTCOMM_V1_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case DISTCOMM_V1_UNSUPPORTED:
      return "UNSUPPORTED";
    case DISTCOMM_V1_BACKEND_ERROR:
      return "BACKEND_ERROR";
    case DISTCOMM_V1_RENDEZVOUS:
      return "RENDEZVOUS";
    default:
      return "unknown status";
  }
}

// The status of the exception being handled (call inside a catch block), its text in `err`.
inline int status_of_current(distcomm_error_v1* err) noexcept {
  try {
    throw;
  } catch (const timeout_error& e) {
    set_error(err, e.what());
    return DISTCOMM_V1_TIMEOUT;
  } catch (const mismatch_error& e) {
    set_error(err, e.what());
    return DISTCOMM_V1_MISMATCH;
  } catch (const peer_lost_error& e) {
    set_error(err, e.what());
    return DISTCOMM_V1_PEER_LOST;
  } catch (const invalid_argument_error& e) {
    set_error(err, e.what());
    return DISTCOMM_V1_INVALID_ARGUMENT;
  } catch (const rendezvous_error& e) {
    set_error(err, e.what());
    return DISTCOMM_V1_RENDEZVOUS;
  } catch (const std::exception& e) {
    set_error(err, e.what());
    return DISTCOMM_V1_BACKEND_ERROR;
  } catch (...) {
    set_error(err, "unknown exception");
    return DISTCOMM_V1_BACKEND_ERROR;
  }
}

// Runs f() and returns DISTCOMM_V1_OK, or the status of what it threw: nothing escapes.
template <class F>
int guarded(distcomm_error_v1* err, F&& f) noexcept {
  try {
    f();
    return DISTCOMM_V1_OK;
  } catch (...) {
    return status_of_current(err);
  }
}

// The log callback a host gives its plugins: their lines go to DistComm's log at their level.
inline void log_line(void*, int level, const char* message) {
  const int l =
      std::clamp(level, static_cast<int>(log_level::error), static_cast<int>(log_level::debug));
  log(static_cast<log_level>(l), message != nullptr ? message : "");
}

// Throws the DistComm exception for a failed status; `backend` and `routine` name the plugin and
// the ABI function for backend_error.
[[noreturn]] inline void throw_status(int status, const std::string& backend, const char* routine,
                                      const std::string& text) {
  switch (status) {
    case DISTCOMM_V1_TIMEOUT:
      throw timeout_error(text);
    case DISTCOMM_V1_MISMATCH:
      throw mismatch_error(text);
    case DISTCOMM_V1_PEER_LOST:
      throw peer_lost_error(text);
    case DISTCOMM_V1_INVALID_ARGUMENT:
    case DISTCOMM_V1_UNSUPPORTED:
      throw invalid_argument_error(text);
    case DISTCOMM_V1_RENDEZVOUS:
      throw rendezvous_error(text);
    default:
      throw backend_error(backend, routine, status, text);
  }
}

}  // namespace distcomm::plugin
