/* libexlr8client's REST client from C, linked with the shared library
 * alone: against the `exlr8d serve` at argv[1] (whose cache exlr8client
 * _rest_test filled by a pull of exlr8/test home TP 2 rank 1, job 1), lists
 * the filesets, reads the rank's status and the job, and meets a 404 and
 * a bad body. Prints "ok: N filesets" and exits 0, or names the first
 * failure and exits 1. */
#include <exlr8/exlr8client.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

#define CHECK_OK(call)                                                                         \
  do {                                                                                         \
    exlr8_status s_ = (call);                                                                  \
    if (s_ != EXLR8_OK) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, exlr8_status_name(s_), \
              exlr8_last_error_message());                                                     \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

static int progress_calls = 0;

static int on_progress(void* user, uint64_t job_id, const char* state, const char* json) {
  (void)user;
  (void)json;
  ++progress_calls;
  return job_id == 1 && state[0] != '\0' ? 0 : 1;
}

int main(int argc, char** argv) {
  exlr8_api* api = NULL;
  char* json = NULL;
  char* state = NULL;
  size_t count = 0;
  int complete = 0, status = 0;
  exlr8_pull_request bad;
  uint64_t id = 0;
  if (argc != 2) {
    fprintf(stderr, "usage: %s ENDPOINT\n", argv[0]);
    return 2;
  }
  CHECK_OK(exlr8_api_open(argv[1], NULL, &api));
  CHECK_OK(exlr8_api_set_timeout(api, 10000));

  CHECK_OK(exlr8_api_filesets(api, &json, &count));
  CHECK(count == 1);
  CHECK(json[0] == '[' && strstr(json, "\"exlr8/test\"") != NULL);
  exlr8_free_string(json);

  CHECK_OK(exlr8_api_rank_status(api, "exlr8/test", "home", 2, 1, NULL, &complete, &json));
  CHECK(complete == 1);
  CHECK(strstr(json, "\"complete\":true") != NULL);
  exlr8_free_string(json);

  CHECK_OK(exlr8_api_follow_job(api, 1, 10, 10000, on_progress, NULL, &state, NULL));
  CHECK(strcmp(state, "done") == 0);
  CHECK(progress_calls == 1);
  exlr8_free_string(state);

  /* A 404: the code, "METHOD PATH: 404: message", and the answer's body. */
  json = NULL;
  CHECK(exlr8_api_request(api, "GET", "/v1/jobs/999", NULL, &status, &json) == EXLR8_NOT_FOUND);
  CHECK(status == 404);
  CHECK(json != NULL && strstr(json, "\"status\":404") != NULL);
  CHECK(strncmp(exlr8_last_error_message(), "GET /v1/jobs/999: 404: ", 23) == 0);
  exlr8_free_string(json);

  /* A bad field: the server's message, naming it. */
  exlr8_pull_request_init(&bad);
  bad.repo = "exlr8/test";
  bad.manifest = "home";
  bad.tp = 2;
  bad.rank = 5;
  CHECK(exlr8_api_submit_pull(api, &bad, &id, NULL) == EXLR8_INVALID_ARGUMENT);
  CHECK(strstr(exlr8_last_error_message(), "POST /v1/pulls: 400: ") != NULL);
  CHECK(strstr(exlr8_last_error_message(), "rank") != NULL);
  CHECK(id == 0);
  /* No repo: refused before any request. */
  bad.repo = NULL;
  CHECK(exlr8_api_submit_pull(api, &bad, &id, NULL) == EXLR8_INVALID_ARGUMENT);
  CHECK(strstr(exlr8_last_error_message(), "repo is required") != NULL);

  exlr8_api_close(api);
  exlr8_api_close(NULL);
  exlr8_free_string(NULL);
  printf("ok: %u filesets\n", (unsigned)count);
  return 0;
}
