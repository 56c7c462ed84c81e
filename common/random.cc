#include "common/random.h"

namespace sluice {

UniformRandom threadLocalUniform() {
  return [] {
    thread_local std::mt19937_64 engine{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
  };
}

UniformRandom uniformFrom(std::mt19937_64& engine) {
  return [&engine] { return std::uniform_real_distribution<double>(0.0, 1.0)(engine); };
}

}  // namespace sluice
