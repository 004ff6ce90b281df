// C++ exceptions as Python ones, with the CLI's messages: std::invalid_argument -> ValueError,
// std::runtime_error (kvlab throws it for files) -> kvlab.FileError (an OSError),
// MissingFile -> kvlab.MissingFileError (also a FileNotFoundError), std::out_of_range ->
// IndexError (pybind11's own rule).
#include "errors.h"
#include "common.h"

namespace kvlab::bind {

void register_errors(py::module_& m) {
  static PyObject* file_error = PyErr_NewExceptionWithDoc(
      "kvlab.FileError",
      "A file kvlab reads or writes is missing, unreadable or malformed (the CLI's message).", PyExc_OSError,
      nullptr);
  static PyObject* missing_file = PyErr_NewExceptionWithDoc(
      "kvlab.MissingFileError", "The file does not exist.",
      py::make_tuple(py::handle(file_error), py::handle(PyExc_FileNotFoundError)).release().ptr(), nullptr);
  m.add_object("FileError", py::handle(file_error));
  m.add_object("MissingFileError", py::handle(missing_file));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::builtin_exception&) {
      throw;  // pybind11's own (cast errors, ...): its default translation
    } catch (const MissingFile& e) {
      PyErr_SetString(missing_file, e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::runtime_error& e) {
      PyErr_SetString(file_error, e.what());
    }
  });
}

std::function<void(const EvalProgress&)> LongCall::hook() {
  return [this](const EvalProgress& p) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!progress_.is_none()) progress_(p.layers_done, p.layers_total);
  };
}

void LongCall::check() const {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

}  // namespace kvlab::bind
