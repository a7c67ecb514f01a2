// The mpi backend's tag mapping (backends/mpi/src/tags.hpp), a pure function of MPI_TAG_UB: on the
// standard's minimum, 32767, DistComm's own tags and users' tags travel as distinct MPI tags within
// the bound and a tag that cannot fit is refused by name; on Open MPI's 2^31 - 1 tags travel as
// they are. The same mapping over a real MPI, under mpirun: tests/mpi/test_mpi_tags.cpp.
#include <doctest/doctest.h>

#include <climits>
#include <set>
#include <string>

#include "tags.hpp"

namespace dc = distcomm;
using dc::detail::mpi_tag;
using dc::detail::own_tag_span;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the invalid_argument_error mpi_tag(tag, ub) throws; empty when it throws none.
std::string refusal(dc::tag_t tag, int ub) {
  try {
    (void)mpi_tag(tag, ub);
  } catch (const dc::invalid_argument_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("mpi tags: under MPI_TAG_UB 32767 own and user tags travel apart, inside the bound") {
  constexpr int ub = 32767;
  const dc::tag_t last_user = dc::detail::largest_user_tag(ub);
  CHECK(last_user == 32767 - 1024);
  std::set<int> seen;
  for (dc::tag_t t = 0; t < own_tag_span; ++t) {
    const int m = mpi_tag(t, ub);
    CHECK(m == static_cast<int>(t));  // as they are: a collective's tag means the same everywhere
    seen.insert(m);
  }
  // Every user tag there is room for: none travels as an own tag, as another user tag, or
  // beyond the bound.
  int outside = 0;
  for (dc::tag_t u = 0; u <= last_user; ++u) {
    const int m = mpi_tag(dc::user_tag_base + u, ub);
    if (m < 0 || m > ub || !seen.insert(m).second) ++outside;
  }
  CHECK(outside == 0);
  CHECK(seen.size() == static_cast<std::size_t>(ub) + 1);  // every MPI tag used exactly once
}

TEST_CASE("mpi tags: a tag that cannot be mapped is refused naming it, the bound and the range") {
  constexpr int ub = 32767;
  const std::string user = refusal(dc::user_tag_base + 31744, ub);
  CHECK(contains(user, "mpi: user tag 31744 cannot be sent"));
  CHECK(contains(user, "reports MPI_TAG_UB 32767"));
  CHECK(contains(user, "user tags 0 to 31743"));
  CHECK(contains(user, "use a tag in that range"));
  CHECK(contains(refusal(dc::user_tag_base + (dc::user_tag_base - 1), ub), "user tag 1073741823"));
  // A tag below user_tag_base beyond the span kept for DistComm's own would meet users' tags.
  const std::string own = refusal(own_tag_span, ub);
  CHECK(contains(own, "mpi: tag 1024 of a collective or a direct backend call"));
  CHECK(contains(own, "MPI_TAG_UB 32767"));
  CHECK(contains(refusal(dc::user_tag_base - 1, ub), "tag 1073741823 of a collective"));
  CHECK(refusal(dc::user_tag_base + 31743, ub).empty());
}

TEST_CASE("mpi tags: where MPI_TAG_UB reaches 2^31 - 1 (Open MPI), tags travel as they are") {
  constexpr int ub = INT_MAX;
  CHECK(dc::detail::largest_user_tag(ub) == dc::user_tag_base - 1);
  for (dc::tag_t t :
       {dc::tag_t{0}, dc::tag_t{7}, own_tag_span, dc::tag_t{5000}, dc::user_tag_base - 1,
        dc::user_tag_base, dc::user_tag_base + 5, dc::detail::largest_tag}) {
    CAPTURE(t);
    CHECK(mpi_tag(t, ub) == static_cast<int>(t));
  }
  // Nothing in DistComm produces a tag above 2^31 - 1; a direct caller that passes one is told.
  CHECK(contains(refusal(dc::detail::largest_tag + 1, ub), "is above MPI_TAG_UB"));
}

TEST_CASE("mpi tags: a bound between the two splits the range, one to one") {
  // Some user tags would fit as they are, but mixing the two ways could send two tags as one
  // (user tag 0 as itself, user tag 2^30 - 1024 moved onto it): every user tag is moved.
  for (const int ub : {static_cast<int>(dc::user_tag_base) + 100, INT_MAX - 1}) {
    CAPTURE(ub);
    const dc::tag_t last = dc::detail::largest_user_tag(ub);
    CHECK(mpi_tag(31, ub) == 31);
    CHECK(mpi_tag(dc::user_tag_base, ub) == static_cast<int>(own_tag_span));
    std::set<int> seen;
    for (dc::tag_t u : {dc::tag_t{0}, dc::tag_t{1}, dc::tag_t{100}, dc::tag_t{101}, last - 1, last,
                        dc::user_tag_base - own_tag_span}) {
      if (u > last) continue;
      const int m = mpi_tag(dc::user_tag_base + u, ub);
      CHECK(m == static_cast<int>(own_tag_span + u));
      CHECK(m <= ub);
      seen.insert(m);
    }
    CHECK(seen.size() >= 6);
    if (last < dc::user_tag_base - 1) {
      CHECK(last == static_cast<dc::tag_t>(ub) - own_tag_span);
      CHECK(mpi_tag(dc::user_tag_base + last, ub) == ub);
      CHECK(contains(refusal(dc::user_tag_base + last + 1, ub), "cannot be sent"));
    } else {
      CHECK(mpi_tag(dc::detail::largest_tag, ub) == static_cast<int>(own_tag_span + last));
    }
  }
}
