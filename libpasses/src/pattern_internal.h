// Internal: what the pattern files share. The pieces of pattern text that the printer
// (pattern_printer.cpp) and the matcher's reasons (pattern_matcher.cpp) both write, so a reason
// spells a node as the pattern does; and the checks of a complete binding that are not edges
// (node conditions, leaf operands: pattern_operands.cpp), each split into a test that formats
// nothing and the reason, built only when someone listens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fusectl/passes/pattern.h"

namespace fusectl::passes {

// "" for the default domain, whichever way it is spelled.
inline std::string_view normDomain(std::string_view d) {
  return d == "ai.onnx" ? std::string_view() : d;
}

std::string opsText(const PatternNode& n);               // "Relu|Clip", "fusectl::*"
std::string dtypesText(const std::vector<DType>& dtypes);  // "float|float16"
std::string conditionText(const NodeCondition& c);       // "group=1", "dtype=float"
std::string numberText(double v);                        // "0.5", "2.0": reads back as a float
std::string leafText(const PatternLeaf& leaf);           // "$x:const", "0.5"

// Whether the ONNX op's inputs may be exchanged (Add, Mul, Max...).
bool isCommutativeOp(std::string_view op_type);

// Node conditions (`Conv[group=1, dtype=float]`).
bool conditionHolds(const NodeCondition& c, const Node& n);
std::string conditionFailure(const NodeCondition& c, const Node& n);  // when it does not hold
// The name a failed condition is reported under: "attr:c.group", "dtype:c".
std::string conditionName(const NodeCondition& c, const PatternNode& pn);

// Leaf operands: `v` is what node `n` reads at input `slot` (nullptr when absent).
bool leafFits(const PatternLeaf& leaf, const Value* v);
std::string leafFailure(const PatternLeaf& leaf, const Node& n, size_t slot, const Value* v);

// "'X' is a graph input", "'c' is a constant", "'y' is computed by Relu_2"...
std::string valueOrigin(const Value& v);

}  // namespace fusectl::passes
