// Status values and events of the runtime API (PjRT's C API returns an error object from every call and an event
// for everything asynchronous; so does this one). A Status is a code and a one-line message; StatusOr<T> is a
// value or a non-ok Status. Future<T> is the result of an asynchronous call: await() blocks until it is ready.
// The convenience layer (runtime.h: Client::execute, load_file, ...) turns a non-ok Status into runtime::Error.
#pragma once

#include <future>
#include <optional>
#include <string>
#include <utility>

#include "tpusim/runtime/npy.h"

namespace tpusim::runtime {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // a caller's mistake: wrong shape, dtype, device, name; a deleted buffer
  kNotFound,            // a file or a name that does not exist
  kOutOfMemory,         // a device's HBM cannot hold the request (the message names what is live)
  kFailedPrecondition,  // the object is not in a state that allows the call (e.g. the client is shutting down)
  kAborted,             // the simulated chip faulted while running (the message is the simulator's)
  kInternal,            // a bug
};
const char* status_code_name(StatusCode c);  // "INVALID_ARGUMENT", ...

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;  // "OK" or "OUT_OF_MEMORY: ..."
  void throw_if_error() const {   // the convenience layer: throws runtime::Error(message())
    if (!ok()) throw Error(message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}               // NOLINT: implicit, as absl::StatusOr
  StatusOr(Status status) : status_(std::move(status)) {        // NOLINT
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr made from an ok Status without a value");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // The value; throws runtime::Error with the status's message if there is none.
  T& value() & {
    status_.throw_if_error();
    return *value_;
  }
  const T& value() const& {
    status_.throw_if_error();
    return *value_;
  }
  T&& value() && {
    status_.throw_if_error();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

// The result of an asynchronous call, shared by every copy (a std::shared_future underneath). A default-made
// Future is not valid(). await() may be called from any thread, any number of times.
template <class T>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_future<StatusOr<T>> f) : f_(std::move(f)) {}
  static Future ready_with(StatusOr<T> v) {
    std::promise<StatusOr<T>> p;
    p.set_value(std::move(v));
    return Future(p.get_future().share());
  }
  bool valid() const { return f_.valid(); }
  bool ready() const { return f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  // Blocks until ready. On a temporary Future the result is copied out, so `auto& r = f().await()` is safe.
  const StatusOr<T>& await() const& { return f_.get(); }
  StatusOr<T> await() && { return f_.get(); }

 private:
  std::shared_future<StatusOr<T>> f_;
};

struct Done {};                 // the value of an event
using Event = Future<Done>;     // becomes ready with Ok or with the error that prevented it
template <class T>
using Promise = std::promise<StatusOr<T>>;

}  // namespace tpusim::runtime
