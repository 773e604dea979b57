// Exceptions thrown by zipccl::hetero.
//
// The library is C++ (not a C ABI), so it reports failures by throwing. Every exception derives from
// zipccl::hetero::Error, and what() names the constraint that failed together with the values that
// broke it, e.g. "module 'vision': 6 ranks (0-5) are not divisible by tp*cp*pp = 4 (tp 2, cp 1, pp 2)".
// Functions document which of these they throw; nothing in the library aborts or asserts on input.
#pragma once

#include <stdexcept>
#include <string>

namespace zipccl::hetero {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The layout cannot exist: a size below 1, a span outside the world, a span not divisible by
// tp*cp*pp, spans that partially overlap or leave ranks uncovered, a bad rank order.
class LayoutError : public Error {
 public:
  using Error::Error;
};

// The batch does not describe a tensor: negative token counts, hidden or element size below 1,
// byte counts that overflow 64 bits.
class BatchError : public Error {
 public:
  using Error::Error;
};

// The request is valid but beyond a limit the library keeps so that a typo cannot exhaust memory or
// time: world size (kMaxWorldSize), samples (kMaxSamples), transfers per plan
// (PlanOptions::max_transfers). The message names the value, the limit and how to raise it.
class LimitError : public Error {
 public:
  using Error::Error;
};

// Text that does not parse (the forms used by `zipccl plan`: "tp=2,ranks=0-7", "576,144x3", "bf16").
class ParseError : public Error {
 public:
  using Error::Error;
};

// A plan run with the wrong rank, buffers or communicator, or a failure reported by NCCL or CUDA.
class ExecutionError : public Error {
 public:
  using Error::Error;
};

}  // namespace zipccl::hetero
