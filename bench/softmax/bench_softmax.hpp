// The two suites of bench_softmax.
#pragma once

namespace mha::bench {

// Registers the reshape/<config>/<impl>/threads:<t> benchmarks (bench_reshape.cpp).
void register_reshape();

}  // namespace mha::bench
