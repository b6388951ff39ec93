// One node of a model as a model of its own: what runs a rewritten node in isolation
// (kernels::measureReplacementNodes, for `fusectl optimize --gate`).
#pragma once

#include <memory>

#include "fusectl/graph/graph.h"

namespace fusectl {

// A model whose main graph is a copy of `node` (a node of `model`'s main graph) alone: each
// input that is a constant becomes an initializer (sharing its bytes), every other one a graph
// input of the same name and type; an input read twice appears once. Its outputs are the
// graph's outputs, output 0 first (omitted optional outputs stay omitted). IR version, opset
// imports and model-local functions are `model`'s.
std::unique_ptr<Model> singleNodeModel(const Model& model, const Node& node);

}  // namespace fusectl
