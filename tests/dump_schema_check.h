// A small JSON Schema checker for the tests: enough of draft 2020-12 to validate `fusectl dump`
// output against docs/schemas/dump.schema.json (type, const, enum, required, properties,
// additionalProperties, items, $ref to #/$defs, oneOf, minimum). No validator library is
// available, and the tests must check the schema file itself, not a copy of it.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace fusectl::testing {

inline nlohmann::json loadDumpSchema() {
  std::ifstream in(std::string(FUSECTL_SOURCE_DIR) + "/docs/schemas/dump.schema.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline bool jsonHasType(const nlohmann::json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

// Returns "" when `v` matches `schema`, else the JSON path and the reason of the first mismatch.
inline std::string checkJsonSchema(const nlohmann::json& v, const nlohmann::json& schema,
                                   const nlohmann::json& root, const std::string& path = "$") {
  // Boolean schemas: "additionalProperties": false rejects every key not listed.
  if (schema.is_boolean()) return schema.get<bool>() ? "" : path + ": not allowed by the schema";
  if (schema.contains("$ref")) {
    std::string ref = schema["$ref"];
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0) return path + ": unsupported $ref " + ref;
    return checkJsonSchema(v, root["$defs"][ref.substr(prefix.size())], root, path);
  }
  if (schema.contains("type")) {
    bool ok = false;
    if (schema["type"].is_array()) {
      for (const auto& t : schema["type"]) ok = ok || jsonHasType(v, t);
    } else {
      ok = jsonHasType(v, schema["type"]);
    }
    if (!ok) return path + ": expected type " + schema["type"].dump() + ", got " + v.dump();
  }
  if (schema.contains("const") && v != schema["const"]) {
    return path + ": expected " + schema["const"].dump();
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const auto& e : schema["enum"]) found = found || e == v;
    if (!found) return path + ": " + v.dump() + " not in enum";
  }
  if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema["minimum"].get<double>()) {
    return path + ": below minimum";
  }
  if (schema.contains("oneOf")) {
    int matches = 0;
    std::string last;
    for (const auto& alt : schema["oneOf"]) {
      std::string r = checkJsonSchema(v, alt, root, path);
      if (r.empty()) ++matches; else last = r;
    }
    if (matches != 1) return path + ": matches " + std::to_string(matches) + " of oneOf (" + last + ")";
  }
  if (v.is_object()) {
    if (schema.contains("required")) {
      for (const auto& key : schema["required"]) {
        if (!v.contains(key.get<std::string>())) return path + ": missing required key " + key.dump();
      }
    }
    for (const auto& [key, item] : v.items()) {
      std::string sub = path + "." + key;
      if (schema.contains("properties") && schema["properties"].contains(key)) {
        std::string r = checkJsonSchema(item, schema["properties"][key], root, sub);
        if (!r.empty()) return r;
      } else if (schema.contains("additionalProperties")) {
        std::string r = checkJsonSchema(item, schema["additionalProperties"], root, sub);
        if (!r.empty()) return r;
      }
    }
  }
  if (v.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < v.size(); ++i) {
      std::string r = checkJsonSchema(v[i], schema["items"], root, path + "[" + std::to_string(i) + "]");
      if (!r.empty()) return r;
    }
  }
  return "";
}

inline std::string checkDumpJson(const nlohmann::json& v) {
  static const nlohmann::json schema = loadDumpSchema();
  return checkJsonSchema(v, schema, schema);
}

}  // namespace fusectl::testing
