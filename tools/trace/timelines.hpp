// distcomm-trace's reading of timeline files (DISTCOMM_TIMELINE, trace/timeline.hpp): the last
// thing each rank's timeline recorded, set against its flight recorder's dump. A rank that hung
// outside DistComm shows a last span that ended long before its dump; a killed rank's file ends
// where it died (a timeline is written out at least every 100 ms of activity).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verdict.hpp"

namespace distcomm::trace_tool {

// One rank's timeline file.
struct timeline_file {
  std::string path;
  int rank = -1;          // its process (pid); -1 when the file holds no event
  bool complete = false;  // closed by its process (else it died, or is still running)
  std::size_t spans = 0;
  std::string last_name, last_track;  // the span that ended last, and its track's name
  std::int64_t last_end_us = 0;       // system clock, as the flight recorder's times
};

// Reads one file, also one its process never closed; throws std::runtime_error naming the file
// when it is not a timeline at all.
timeline_file read_timeline(const std::string& path);

// The lines distcomm-trace prints for them, each rank's last span against its dump (or, without
// one, against the latest dump of the job).
std::string describe_timelines(const std::vector<timeline_file>& timelines,
                               const std::vector<dump>& dumps);

}  // namespace distcomm::trace_tool
