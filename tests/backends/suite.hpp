// One set of test bodies for every backend. A backend's main includes context.hpp, defines its
// environment (see there), names it with TYPE_TO_STRING_AS, defines DISTCOMM_SUITE_ENVS as the
// environments to run on, and includes this header. Every rank runs the same test cases in the
// order of the lines below (doctest orders by file and line), so the backends each case makes
// pair up across ranks.
#pragma once

#include "allreduce.hpp"
#include "async.hpp"
#include "collectives.hpp"
#include "engine.hpp"
#include "exchange.hpp"
#include "groups.hpp"
#include "mismatch.hpp"
#include "overflow.hpp"
#include "p2p.hpp"

#ifndef DISTCOMM_SUITE_ENVS
#error "define DISTCOMM_SUITE_ENVS, the environments to run the suite on, before including it"
#endif

TEST_CASE_TEMPLATE_INVOKE(backend_suite_p2p_order, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_p2p_mismatch, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_p2p_up_to, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_p2p_timeout, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_p2p_cancel, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_p2p_any, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_ring, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_tree, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_rd, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_ps, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_native, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_automatic, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_grouped, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_native_vs_ring, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_collectives, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_exchange, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_groups, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_deterministic, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_overflow, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_async, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_engine_orders, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_engine_join, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_engine_callbacks, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_engine_mismatch, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_mismatch, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_strategy_mismatch, DISTCOMM_SUITE_ENVS);
TEST_CASE_TEMPLATE_INVOKE(backend_suite_departed, DISTCOMM_SUITE_ENVS);
