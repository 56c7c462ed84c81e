#pragma once

// The source of randomness sluice's policies draw from: retry jitter and
// endpoint choice. Injected as a function so tests are exact (a seeded
// engine) and production is lock-free (one engine per thread).

#include <functional>
#include <random>

namespace sluice {

/**
 * A source of uniform doubles in [0, 1). Values outside that range (or NaN)
 * from a misbehaving source are clamped by its users, never trusted.
 */
using UniformRandom = std::function<double()>;

/**
 * A UniformRandom drawing from a per-thread std::mt19937_64 seeded from
 * std::random_device: the production source, lock-free across workers.
 */
UniformRandom threadLocalUniform();

/** A UniformRandom drawing from `engine` (which must outlive it); for seeded tests. */
UniformRandom uniformFrom(std::mt19937_64& engine);

}  // namespace sluice
