//===- collectives_test.h - distopt-rt-test's shared pieces -----*- C++ -*-===//
//
// What the test driver's modes share across its files
// (collectives_test.cpp, collectives_digest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_COLLECTIVES_TEST_H
#define DISTOPT_RT_COLLECTIVES_TEST_H

#include "distopt_rt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace collectives_test {

/// This process's rank and the world's size.
extern int64_t myRank, worldSize;

/// Counts a check; prints `what` on this rank when it failed.
void expect(bool ok, const std::string &what);

/// Element i of `base`, of dtype t, set to v.
void store(distopt_rt_dtype t, void *base, int64_t i, double v);

/// A buffer of `count` elements of dtype t (at least one).
std::vector<char> buffer(distopt_rt_dtype t, int64_t count);

/// The digest mode (collectives_digest.cpp).
void digestMode(distopt_rt_comm *comm);

} // namespace collectives_test

#endif // DISTOPT_RT_COLLECTIVES_TEST_H
