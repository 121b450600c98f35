//===- SessionHyperparameters.cpp - rates and hyperparameters ---*- C++ -*-===//
//
// What a program may change between steps: the learning rate, and the
// hyperparameters a step takes at run time (arguments of role
// hyperparameter, `group0.lr`, `group0.beta1`, ...), which the session keeps
// from step to step as torch.optim keeps its param_groups. A step compiled
// with a rate per group has no `lr` argument: the session's rate is then
// every group's.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Step.h"

#include <cmath>
#include <string>

using namespace distopt;

namespace {

bool isHyperparameter(const step::Value &v) {
  return !v.isTensor() && v.role == step::Role::Hyperparameter;
}

/// A group's rate: a hyperparameter named `<group>.lr`.
bool isRate(const step::Value &v) {
  std::string_view name = v.name;
  return isHyperparameter(v) && name.size() >= 3 &&
         name.substr(name.size() - 3) == ".lr";
}

bool isScalarState(const step::Value &v) {
  return !v.isTensor() && v.role == step::Role::State;
}

bool hasLearningRateArgument(const step::Interface &abi) {
  for (const step::Value &v : abi.args)
    if (v.role == step::Role::LearningRate)
      return true;
  return false;
}

} // namespace

namespace distopt::rt {

void setSessionRate(distopt_session *session, double lr) {
  session->lr = lr;
  const step::Interface &abi = session->step->abi;
  for (size_t i = 0; i < abi.args.size(); ++i)
    if (isRate(abi.args[i]))
      session->scalarState[i] = lr;
}

} // namespace distopt::rt

extern "C" {

distopt_rt_status distopt_session_set_lr(distopt_session *session, double lr) {
  if (!session)
    return rt::fail(DISTOPT_RT_INVALID_ARGUMENT,
                    "distopt_session_set_lr: null session");
  // torch.optim's rule: a learning rate is a finite, non-negative number.
  if (!std::isfinite(lr) || lr < 0)
    return session->invalid(
        "the learning rate must be finite and non-negative, not " +
        rt::formatNumber(lr));
  rt::setSessionRate(session, lr);
  return DISTOPT_RT_OK;
}

double distopt_session_lr(const distopt_session *session) {
  if (!session)
    return NAN;
  // A rate per group: the first group's.
  const step::Interface &abi = session->step->abi;
  if (!hasLearningRateArgument(abi))
    for (size_t i = 0; i < abi.args.size(); ++i)
      if (isRate(abi.args[i]))
        return session->scalarState[i];
  return session->lr;
}

distopt_rt_status distopt_session_set_hyperparameter(distopt_session *session,
                                                     int64_t arg,
                                                     double value) {
  if (!session || arg < 0 ||
      arg >= static_cast<int64_t>(session->step->abi.args.size()))
    return rt::fail(DISTOPT_RT_INVALID_ARGUMENT,
                    "distopt_session_set_hyperparameter: no argument #" +
                        std::to_string(arg));
  const step::Value &v = session->step->abi.args[arg];
  if (!isHyperparameter(v))
    return session->invalid("argument #" + std::to_string(arg) + " ('" +
                            v.name + "') is not a hyperparameter");
  if (!std::isfinite(value) || (isRate(v) && value < 0))
    return session->invalid("hyperparameter '" + v.name + "' must be " +
                            (isRate(v) ? "finite and non-negative" : "finite") +
                            ", got " + std::to_string(value));
  session->scalarState[arg] = value;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_hyperparameter(const distopt_session *session,
                                                 int64_t arg, double *value) {
  if (!session || !value || arg < 0 ||
      arg >= static_cast<int64_t>(session->step->abi.args.size()) ||
      !isHyperparameter(session->step->abi.args[arg]))
    return rt::fail(DISTOPT_RT_INVALID_ARGUMENT,
                    "distopt_session_hyperparameter: argument #" +
                        std::to_string(arg) + " is not a hyperparameter");
  *value = session->scalarState[arg];
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_set_scalar_state(distopt_session *session,
                                                   int64_t arg, double value) {
  if (!session || arg < 0 ||
      arg >= static_cast<int64_t>(session->step->abi.args.size()))
    return rt::fail(DISTOPT_RT_INVALID_ARGUMENT,
                    "distopt_session_set_scalar_state: no argument #" +
                        std::to_string(arg));
  const step::Value &v = session->step->abi.args[arg];
  if (!isScalarState(v))
    return session->invalid("argument #" + std::to_string(arg) + " ('" +
                            v.name + "') is not scalar state");
  std::string_view type = v.dtype->name;
  bool integer = type == "i64" || type == "i32";
  double most = type == "i32" ? 2147483647.0 : 0x1p53;
  std::string what;
  if (integer && !(value >= 0 && value <= most && std::floor(value) == value))
    what = std::string("a whole number from 0 to ") +
           (type == "i32" ? "2^31 - 1" : "2^53");
  else if (!integer && v.name == "loss_scale" &&
           !(std::isfinite(value) && value > 0))
    what = "finite and positive";
  else if (!integer && !std::isfinite(value))
    what = "finite";
  if (!what.empty())
    return session->invalid("state '" + v.name + "' must be " + what +
                            ", got " + rt::formatNumber(value));
  session->scalarState[arg] = value;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_scalar_state(const distopt_session *session,
                                               int64_t arg, double *value) {
  if (!session || !value || arg < 0 ||
      arg >= static_cast<int64_t>(session->step->abi.args.size()) ||
      !isScalarState(session->step->abi.args[arg]))
    return rt::fail(DISTOPT_RT_INVALID_ARGUMENT,
                    "distopt_session_scalar_state: argument #" +
                        std::to_string(arg) + " is not scalar state");
  *value = session->scalarState[arg];
  return DISTOPT_RT_OK;
}

} // extern "C"
