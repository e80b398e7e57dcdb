// libexlr8client's REST client, C API (exlr8/exlr8client.h, "the REST API
// of exlr8d serve") over rest_client.h: requests, the mapping of an HTTP
// error answer to an exlr8_status and its message, and the typed helpers,
// which read the answers with format/json.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "client/exlr8client/c_api_errors.h"
#include "client/exlr8client/rest_client.h"
#include "exlr8/exlr8client.h"
#include "format/json.h"

struct exlr8_api {
  exlr8::rest::Endpoint endpoint;
  std::string token;
  std::chrono::milliseconds timeout{30000};
};

namespace {

using exlr8::JsonValue;
using exlr8::Status;
using exlr8::capi::Fail;
using exlr8::capi::Guard;

constexpr std::chrono::milliseconds kDefaultTimeout{30000};

exlr8_status Fail(const Status& s, const std::string& prefix) {
  return Fail(exlr8::capi::CodeOf(s.code()), prefix + s.message());
}

// A malloc'ed copy, for exlr8_free_string (nullptr when out of memory).
char* Dup(std::string_view s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

exlr8_status CodeOfHttp(int status) {
  if (status >= 200 && status < 300) return EXLR8_OK;
  switch (status) {
    case 401:
    case 403:
      return EXLR8_PERMISSION_DENIED;
    case 404:
      return EXLR8_NOT_FOUND;
    case 409:
      return EXLR8_FAILED_PRECONDITION;
    case 429:
      return EXLR8_RESOURCE_EXHAUSTED;
    case 501:
      return EXLR8_UNIMPLEMENTED;
    default:
      break;
  }
  if (status >= 500) return EXLR8_UNAVAILABLE;
  if (status >= 400) return EXLR8_INVALID_ARGUMENT;
  return EXLR8_FAILED_PRECONDITION;  // 1xx (never kept) or 3xx: nothing this client follows
}

// The server's message in an error answer: the problem details'
// error.message, else detail, else (not JSON) the start of the body.
std::string ProblemMessage(const exlr8::rest::HttpResponse& r) {
  auto v = exlr8::ParseJson(r.body);
  if (v.ok() && v->is_object()) {
    if (const JsonValue* e = v->Find("error")) {
      if (e->is_object()) {
        if (const JsonValue* m = e->Find("message");
            m != nullptr && m->is_string() && !m->as_string().empty())
          return m->as_string();
      } else if (e->is_string() && !e->as_string().empty()) {
        return e->as_string();
      }
    }
    if (const JsonValue* d = v->Find("detail"); d != nullptr && d->is_string() && !d->as_string().empty())
      return d->as_string();
  }
  if (r.body.empty()) return r.reason.empty() ? std::string("(no message)") : r.reason;
  return exlr8::EscapeForMessage(r.body, 200);
}

// One exchange; EXLR8_OK with the answer for any status, or the error of
// no answer ("METHOD PATH: ...").
exlr8_status Send(const exlr8_api* api, const std::string& method, const std::string& path, std::string body,
                  exlr8::rest::HttpResponse* out) {
  exlr8::rest::HttpRequest request{method, path, std::move(body), api->token};
  auto r = exlr8::rest::Exchange(api->endpoint, request, api->timeout);
  if (!r.ok()) return Fail(r.status(), method + " " + path + ": ");
  *out = std::move(*r);
  return EXLR8_OK;
}

// An answer's error, if it has one.
exlr8_status Check(const std::string& method, const std::string& path, const exlr8::rest::HttpResponse& r) {
  const exlr8_status code = CodeOfHttp(r.status);
  if (code == EXLR8_OK) return EXLR8_OK;
  return Fail(code, method + " " + path + ": " + std::to_string(r.status) + ": " + ProblemMessage(r));
}

// A request whose 2xx answer is a JSON object; `*member` its member `key`
// (the whole object when `key` is empty).
exlr8_status Call(const exlr8_api* api, const std::string& method, const std::string& path, std::string body,
                  const char* key, JsonValue* member) {
  exlr8::rest::HttpResponse r;
  if (exlr8_status s = Send(api, method, path, std::move(body), &r); s != EXLR8_OK) return s;
  if (exlr8_status s = Check(method, path, r); s != EXLR8_OK) return s;
  auto v = exlr8::ParseJson(r.body);
  if (!v.ok())
    return Fail(EXLR8_CORRUPTION, method + " " + path + ": " + std::to_string(r.status) +
                                      ": the answer is not JSON: " + v.status().message());
  if (!v->is_object())
    return Fail(EXLR8_CORRUPTION,
                method + " " + path + ": " + std::to_string(r.status) + ": the answer is not a JSON object");
  if (*key == '\0') {
    *member = std::move(*v);
    return EXLR8_OK;
  }
  const JsonValue* m = v->Find(key);
  if (m == nullptr)
    return Fail(EXLR8_CORRUPTION, method + " " + path + ": " + std::to_string(r.status) +
                                      ": the answer has no \"" + key + "\"");
  *member = *m;
  return EXLR8_OK;
}

exlr8_status Usable(const exlr8_api* api, const char* what) {
  if (api == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": the api handle is NULL");
  return EXLR8_OK;
}

// An object's member as text ("" when absent or not a string).
std::string Text(const JsonValue& o, const char* key) {
  const JsonValue* v = o.is_object() ? o.Find(key) : nullptr;
  return v != nullptr && v->is_string() ? v->as_string() : std::string();
}

// Writes the optional outputs (all allocated first: nothing is written
// unless everything could be).
void Out(char** a, const std::string& a_text, char** b, const std::string& b_text) {
  char* pa = a != nullptr ? Dup(a_text) : nullptr;
  char* pb = nullptr;
  try {
    pb = b != nullptr ? Dup(b_text) : nullptr;
  } catch (...) {
    std::free(pa);
    throw;
  }
  if (a != nullptr) *a = pa;
  if (b != nullptr) *b = pb;
}

// A positive "id" of an object, or 0.
std::uint64_t Id(const JsonValue& o) {
  const JsonValue* v = o.is_object() ? o.Find("id") : nullptr;
  return v != nullptr ? v->as_uint64().value_or(0) : 0;
}

exlr8_status RequireText(const char* value, const char* what, const char* field) {
  if (value == nullptr || *value == '\0')
    return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": " + field + " is required");
  return EXLR8_OK;
}

void AddText(JsonValue& body, const char* key, const char* value) {
  if (value != nullptr) body.Add(key, JsonValue::String(value));
}

template <typename T>
exlr8_status CheckRequest(const T* request, const char* what) {
  if (request == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": the request is NULL");
  if (request->struct_size < sizeof(T))
    return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": struct_size " +
                                            std::to_string(request->struct_size) + " is less than " +
                                            std::to_string(sizeof(T)) + " (use the _init function)");
  if (exlr8_status s = RequireText(request->repo, what, "repo"); s != EXLR8_OK) return s;
  return RequireText(request->manifest, what, "manifest");
}

using Clock = std::chrono::steady_clock;

// Polls GET `path`'s `key` member every `period_ms` until `settled(state)`.
template <typename Settled, typename Progress>
exlr8_status Poll(const exlr8_api* api, const std::string& path, const char* key, const std::string& what,
                  uint32_t period_ms, uint32_t timeout_ms, Settled settled, Progress progress, char** state,
                  char** json) {
  const auto period = std::chrono::milliseconds(period_ms == 0 ? 200 : period_ms);
  const auto start = Clock::now();
  while (true) {
    JsonValue o;
    if (exlr8_status s = Call(api, "GET", path, "", key, &o); s != EXLR8_OK) return s;
    const std::string st = Text(o, "state");
    const std::string text = o.Dump();
    const bool stop = progress(st, text);
    if (settled(st)) {
      Out(state, st, json, text);
      return EXLR8_OK;
    }
    if (stop) return Fail(EXLR8_CANCELLED, what + ": stopped by the progress callback while " + st);
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (timeout_ms != 0 && waited.count() >= timeout_ms)
      return Fail(EXLR8_UNAVAILABLE,
                  what + " is still " + st + " after " + std::to_string(timeout_ms) + " ms");
    auto sleep = period;
    if (timeout_ms != 0) sleep = std::min(sleep, std::chrono::milliseconds(timeout_ms) - waited);
    std::this_thread::sleep_for(sleep);
  }
}

}  // namespace

extern "C" {

exlr8_status exlr8_api_open(const char* endpoint, const char* token, exlr8_api** out) {
  return Guard("exlr8_api_open", [&]() -> exlr8_status {
    if (endpoint == nullptr || out == nullptr)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_api_open: the endpoint or out is NULL");
    auto ep = exlr8::rest::ParseEndpoint(endpoint);
    if (!ep.ok()) return Fail(ep.status(), "exlr8_api_open: ");
    std::string t = token != nullptr ? token : "";
    for (unsigned char c : t)
      if (c < 0x21 || c == 0x7f)
        return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_api_open: the token holds a space or control character");
    auto api = std::make_unique<exlr8_api>();
    api->endpoint = std::move(*ep);
    api->token = std::move(t);
    *out = api.release();
    return EXLR8_OK;
  });
}

void exlr8_api_close(exlr8_api* api) { delete api; }

exlr8_status exlr8_api_set_timeout(exlr8_api* api, uint32_t timeout_ms) {
  if (exlr8_status s = Usable(api, "exlr8_api_set_timeout"); s != EXLR8_OK) return s;
  api->timeout = timeout_ms == 0 ? kDefaultTimeout : std::chrono::milliseconds(timeout_ms);
  return EXLR8_OK;
}

void exlr8_free_string(char* s) { std::free(s); }

exlr8_status exlr8_api_request(exlr8_api* api, const char* method, const char* path, const char* json_body,
                               int* http_status, char** response_json) {
  return Guard("exlr8_api_request", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_request"); s != EXLR8_OK) return s;
    if (method == nullptr || path == nullptr)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_api_request: the method or path is NULL");
    exlr8::rest::HttpResponse r;
    if (exlr8_status s = Send(api, method, path, json_body != nullptr ? json_body : "", &r); s != EXLR8_OK)
      return s;
    char* body = response_json != nullptr ? Dup(r.body) : nullptr;
    if (http_status != nullptr) *http_status = r.status;
    if (response_json != nullptr) *response_json = body;
    return Check(method, path, r);
  });
}

exlr8_status exlr8_api_filesets(exlr8_api* api, char** json, size_t* count) {
  return Guard("exlr8_api_filesets", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_filesets"); s != EXLR8_OK) return s;
    JsonValue list;
    if (exlr8_status s = Call(api, "GET", "/v1/filesets", "", "filesets", &list); s != EXLR8_OK) return s;
    if (!list.is_array()) return Fail(EXLR8_CORRUPTION, "GET /v1/filesets: \"filesets\" is not an array");
    Out(json, list.Dump(), nullptr, "");
    if (count != nullptr) *count = list.as_array().size();
    return EXLR8_OK;
  });
}

exlr8_status exlr8_api_rank_status(exlr8_api* api, const char* repo, const char* manifest, int32_t tp,
                                   int32_t rank, const char* revision, int* complete, char** json) {
  return Guard("exlr8_api_rank_status", [&]() -> exlr8_status {
    const char* what = "exlr8_api_rank_status";
    if (exlr8_status s = Usable(api, what); s != EXLR8_OK) return s;
    if (exlr8_status s = RequireText(repo, what, "repo"); s != EXLR8_OK) return s;
    if (exlr8_status s = RequireText(manifest, what, "manifest"); s != EXLR8_OK) return s;
    std::string path = "/v1/ranks?repo=" + exlr8::rest::QueryEscape(repo) +
                       "&manifest=" + exlr8::rest::QueryEscape(manifest) + "&tp=" + std::to_string(tp) +
                       "&rank=" + std::to_string(rank);
    if (revision != nullptr) path += "&revision=" + exlr8::rest::QueryEscape(revision);
    JsonValue o;
    if (exlr8_status s = Call(api, "GET", path, "", "rank", &o); s != EXLR8_OK) return s;
    const JsonValue* c = o.is_object() ? o.Find("complete") : nullptr;
    if (c == nullptr || !c->is_bool())
      return Fail(EXLR8_CORRUPTION, "GET " + path + ": the rank has no boolean \"complete\"");
    Out(json, o.Dump(), nullptr, "");
    if (complete != nullptr) *complete = c->as_bool() ? 1 : 0;
    return EXLR8_OK;
  });
}

void exlr8_pull_request_init(exlr8_pull_request* request) {
  if (request == nullptr) return;
  *request = exlr8_pull_request{};
  request->struct_size = sizeof *request;
  request->tp = -1;
  request->rank = -1;
  request->make_room = -1;
}

exlr8_status exlr8_api_submit_pull(exlr8_api* api, const exlr8_pull_request* request, uint64_t* job_id,
                                   char** job_json) {
  return Guard("exlr8_api_submit_pull", [&]() -> exlr8_status {
    const char* what = "exlr8_api_submit_pull";
    if (exlr8_status s = Usable(api, what); s != EXLR8_OK) return s;
    if (exlr8_status s = CheckRequest(request, what); s != EXLR8_OK) return s;
    if (job_id == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": job_id is NULL");
    JsonValue body = JsonValue::Object();
    AddText(body, "repo", request->repo);
    AddText(body, "revision", request->revision);
    AddText(body, "manifest", request->manifest);
    // tp and rank are sent as given (a negative one: the server's 400 names it).
    body.Add("tp", JsonValue::Int(request->tp));
    body.Add("rank", JsonValue::Int(request->rank));
    AddText(body, "endpoint", request->endpoint);
    AddText(body, "pin", request->pin);
    if (request->make_room >= 0) body.Add("make_room", JsonValue::Bool(request->make_room != 0));
    JsonValue job;
    if (exlr8_status s = Call(api, "POST", "/v1/pulls", body.Dump(), "job", &job); s != EXLR8_OK) return s;
    const std::uint64_t id = Id(job);
    if (id == 0) return Fail(EXLR8_CORRUPTION, "POST /v1/pulls: the job has no positive \"id\"");
    Out(job_json, job.Dump(), nullptr, "");
    *job_id = id;
    return EXLR8_OK;
  });
}

exlr8_status exlr8_api_get_job(exlr8_api* api, uint64_t job_id, char** state, char** job_json) {
  return Guard("exlr8_api_get_job", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_get_job"); s != EXLR8_OK) return s;
    JsonValue job;
    if (exlr8_status s = Call(api, "GET", "/v1/jobs/" + std::to_string(job_id), "", "job", &job);
        s != EXLR8_OK)
      return s;
    Out(state, Text(job, "state"), job_json, job.Dump());
    return EXLR8_OK;
  });
}

exlr8_status exlr8_api_cancel_job(exlr8_api* api, uint64_t job_id, char** job_json) {
  return Guard("exlr8_api_cancel_job", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_cancel_job"); s != EXLR8_OK) return s;
    JsonValue job;
    if (exlr8_status s = Call(api, "DELETE", "/v1/jobs/" + std::to_string(job_id), "", "job", &job);
        s != EXLR8_OK)
      return s;
    Out(job_json, job.Dump(), nullptr, "");
    return EXLR8_OK;
  });
}

exlr8_status exlr8_api_follow_job(exlr8_api* api, uint64_t job_id, uint32_t period_ms, uint32_t timeout_ms,
                                  exlr8_job_progress_fn progress, void* user, char** state, char** job_json) {
  return Guard("exlr8_api_follow_job", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_follow_job"); s != EXLR8_OK) return s;
    return Poll(
        api, "/v1/jobs/" + std::to_string(job_id), "job", "job " + std::to_string(job_id), period_ms,
        timeout_ms, [](const std::string& st) { return st == "done" || st == "failed" || st == "cancelled"; },
        [&](const std::string& st, const std::string& text) {
          return progress != nullptr && progress(user, job_id, st.c_str(), text.c_str()) != 0;
        },
        state, job_json);
  });
}

void exlr8_stage_request_init(exlr8_stage_request* request) {
  if (request == nullptr) return;
  *request = exlr8_stage_request{};
  request->struct_size = sizeof *request;
  request->tp = -1;
  request->rank = -1;
  request->device = -1;
  request->release_wait_s = -1;
}

exlr8_status exlr8_api_start_stage(exlr8_api* api, const exlr8_stage_request* request, uint64_t* stage_id,
                                   char** stage_json) {
  return Guard("exlr8_api_start_stage", [&]() -> exlr8_status {
    const char* what = "exlr8_api_start_stage";
    if (exlr8_status s = Usable(api, what); s != EXLR8_OK) return s;
    if (exlr8_status s = CheckRequest(request, what); s != EXLR8_OK) return s;
    if (stage_id == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": stage_id is NULL");
    JsonValue body = JsonValue::Object();
    AddText(body, "repo", request->repo);
    AddText(body, "revision", request->revision);
    AddText(body, "manifest", request->manifest);
    body.Add("tp", JsonValue::Int(request->tp));
    body.Add("rank", JsonValue::Int(request->rank));
    AddText(body, "memory", request->memory);
    AddText(body, "lease", request->lease);
    if (request->device >= 0) body.Add("device", JsonValue::Int(request->device));
    AddText(body, "check", request->check);
    if (request->release_wait_s >= 0) body.Add("release_wait_s", JsonValue::Int(request->release_wait_s));
    JsonValue stage;
    if (exlr8_status s = Call(api, "POST", "/v1/stages", body.Dump(), "stage", &stage); s != EXLR8_OK)
      return s;
    const std::uint64_t id = Id(stage);
    if (id == 0) return Fail(EXLR8_CORRUPTION, "POST /v1/stages: the stage has no positive \"id\"");
    Out(stage_json, stage.Dump(), nullptr, "");
    *stage_id = id;
    return EXLR8_OK;
  });
}

exlr8_status exlr8_api_get_stage(exlr8_api* api, uint64_t stage_id, char** state, char** stage_json) {
  return Guard("exlr8_api_get_stage", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_get_stage"); s != EXLR8_OK) return s;
    JsonValue stage;
    if (exlr8_status s = Call(api, "GET", "/v1/stages/" + std::to_string(stage_id), "", "stage", &stage);
        s != EXLR8_OK)
      return s;
    Out(state, Text(stage, "state"), stage_json, stage.Dump());
    return EXLR8_OK;
  });
}

exlr8_status exlr8_api_wait_stage(exlr8_api* api, uint64_t stage_id, uint32_t period_ms, uint32_t timeout_ms,
                                  char** state, char** stage_json) {
  return Guard("exlr8_api_wait_stage", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_wait_stage"); s != EXLR8_OK) return s;
    return Poll(
        api, "/v1/stages/" + std::to_string(stage_id), "stage", "stage " + std::to_string(stage_id),
        period_ms, timeout_ms,
        [](const std::string& st) {
          return st == "holding" || st == "releasing" || st == "released" || st == "failed" || st == "died";
        },
        [](const std::string&, const std::string&) { return false; }, state, stage_json);
  });
}

exlr8_status exlr8_api_delete_stage(exlr8_api* api, uint64_t stage_id, char** json) {
  return Guard("exlr8_api_delete_stage", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(api, "exlr8_api_delete_stage"); s != EXLR8_OK) return s;
    JsonValue answer;
    if (exlr8_status s = Call(api, "DELETE", "/v1/stages/" + std::to_string(stage_id), "", "", &answer);
        s != EXLR8_OK)
      return s;
    Out(json, answer.Dump(), nullptr, "");
    return EXLR8_OK;
  });
}

}  // extern "C"
