// Every point-to-point algorithm behind the strategies, one header per family in algorithms/:
// common.hpp (shared arguments and the segment loops; the lockstep argument), ring.hpp, tree.hpp,
// recursive_doubling.hpp, sharded.hpp (ordered reduce-scatter, parameter server) and barrier.hpp.
// A strategy includes only the families it uses. Not part of the public API.
#pragma once

#include "distcomm/strategy/algorithms/barrier.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/algorithms/recursive_doubling.hpp"
#include "distcomm/strategy/algorithms/ring.hpp"
#include "distcomm/strategy/algorithms/sharded.hpp"
#include "distcomm/strategy/algorithms/tree.hpp"
