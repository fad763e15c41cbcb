// Configuration parameters, declared once each by the unit that reads them (docs/architecture.md, "Conventions").
//
// A declaration names the field of ChipConfig, the key ("section.name"), the default, the unit of measure, the
// help text and the valid range. Parsing (Boost.Program_options), defaults, validation, error messages and
// describe() are all derived from these declarations in config.cpp.
#pragma once

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/program_options.hpp>

#include "tpusim/sim/config.h"

namespace tpusim::sim::detail {

struct Param {
  std::string key;           // "mxu.rows"
  std::string unit;          // "PEs"
  std::string help;
  std::string type;          // "an integer", "a number", "text": for error messages
  std::string default_text;
  // A fresh Boost value semantic (with its default) for this parameter.
  std::function<boost::program_options::value_semantic*()> semantic;
  std::function<void(ChipConfig&, const boost::program_options::variable_value&)> assign;
  std::function<std::string(const ChipConfig&)> show;
  // Empty if the value in cfg is valid, else the reason ("must be in [1, 1024]").
  std::function<std::string(const ChipConfig&)> check;
};

template <class T>
std::string param_text(const T& v) {
  std::ostringstream s;
  s.precision(15);
  s << v;
  return s.str();
}

// Declares the parameters of one [section], whose values live in the struct `S` at `ChipConfig::*section`.
template <class S>
class ParamSection {
 public:
  ParamSection(std::vector<Param>& out, std::string name, S ChipConfig::*section)
      : out_(out), name_(std::move(name)), section_(section) {}

  // A numeric parameter that must lie in [lo, hi].
  template <class T>
  ParamSection& add(T S::*field, const char* name, std::type_identity_t<T> def, const char* unit, const char* help,
                    std::type_identity_t<T> lo, std::type_identity_t<T> hi) {
    Param p = common(name, unit, help, param_text(def));
    p.type = std::is_integral_v<T> ? "an integer" : "a number";
    p.semantic = [def, text = p.default_text] { return boost::program_options::value<T>()->default_value(def, text); };
    auto sec = section_;
    p.assign = [sec, field](ChipConfig& c, const boost::program_options::variable_value& v) {
      (c.*sec).*field = v.as<T>();
    };
    p.show = [sec, field](const ChipConfig& c) { return param_text((c.*sec).*field); };
    p.check = [sec, field, lo, hi](const ChipConfig& c) -> std::string {
      T v = (c.*sec).*field;
      if (v >= lo && v <= hi) return "";  // false for NaN too
      return "must be in [" + param_text(lo) + ", " + param_text(hi) + "]";
    };
    out_.push_back(std::move(p));
    return *this;
  }

  // A text parameter (any value but the empty string).
  ParamSection& add(std::string S::*field, const char* name, std::string def, const char* unit, const char* help) {
    Param p = common(name, unit, help, def);
    p.type = "text";
    p.semantic = [def] { return boost::program_options::value<std::string>()->default_value(def); };
    auto sec = section_;
    p.assign = [sec, field](ChipConfig& c, const boost::program_options::variable_value& v) {
      (c.*sec).*field = v.as<std::string>();
    };
    p.show = [sec, field](const ChipConfig& c) { return (c.*sec).*field; };
    p.check = [sec, field](const ChipConfig& c) -> std::string {
      return ((c.*sec).*field).empty() ? "must not be empty" : "";
    };
    out_.push_back(std::move(p));
    return *this;
  }

 private:
  Param common(const char* name, const char* unit, const char* help, std::string def) const {
    Param p;
    p.key = name_ + "." + name;
    p.unit = unit;
    p.help = help;
    p.default_text = std::move(def);
    return p;
  }

  std::vector<Param>& out_;
  std::string name_;
  S ChipConfig::*section_;
};

// Each unit's declarations, in the file of the unit that reads them.
void declare_chip_params(std::vector<Param>& out);    // chip.cpp
void declare_core_params(std::vector<Param>& out);    // core.cpp
void declare_mxu_params(std::vector<Param>& out);     // mxu.cpp
void declare_vpu_params(std::vector<Param>& out);     // vpu.cpp
void declare_dma_params(std::vector<Param>& out);     // dma.cpp
void declare_memory_params(std::vector<Param>& out);  // memory.cpp: [hbm] and [vmem]
void declare_energy_params(std::vector<Param>& out);  // energy.cpp: [energy]
void declare_area_params(std::vector<Param>& out);    // energy.cpp: [area]

// All parameters, in section order.
const std::vector<Param>& all_params();

// The presets of configs/*.ini, embedded at build time (a generated file): name and INI text.
const std::vector<std::pair<std::string, std::string>>& embedded_presets();

}  // namespace tpusim::sim::detail
