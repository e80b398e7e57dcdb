/* libexlr8client's REST client from C, linked with the shared library
 * alone: against the `exlr8d serve` at argv[1] (whose cache exlr8client
 * _rest_test filled by a pull of exlr8/test home TP 2 rank 1, job 1), lists
 * the filesets, reads the rank's status and the job, and meets a 404 and
 * a bad body. Prints "ok: N filesets" and exits 0, or names the first
 * failure and exits 1. */
#include <exlr8/exlr8client.h>
#include "c_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  REQUIRE_OK(exlr8_api_open(argv[1], NULL, &api));
  REQUIRE_OK(exlr8_api_set_timeout(api, 10000));

  REQUIRE_OK(exlr8_api_filesets(api, &json, &count));
  REQUIRE(count == 1);
  REQUIRE(json[0] == '[' && strstr(json, "\"exlr8/test\"") != NULL);
  exlr8_free_string(json);

  REQUIRE_OK(exlr8_api_rank_status(api, "exlr8/test", "home", 2, 1, NULL, &complete, &json));
  REQUIRE(complete == 1);
  REQUIRE(strstr(json, "\"complete\":true") != NULL);
  exlr8_free_string(json);

  REQUIRE_OK(exlr8_api_follow_job(api, 1, 10, 10000, on_progress, NULL, &state, NULL));
  REQUIRE(strcmp(state, "done") == 0);
  REQUIRE(progress_calls == 1);
  exlr8_free_string(state);

  /* A 404: the code, "METHOD PATH: 404: message", and the answer's body. */
  json = NULL;
  REQUIRE(exlr8_api_request(api, "GET", "/v1/jobs/999", NULL, &status, &json) == EXLR8_NOT_FOUND);
  REQUIRE(status == 404);
  REQUIRE(json != NULL && strstr(json, "\"status\":404") != NULL);
  REQUIRE(strncmp(exlr8_last_error_message(), "GET /v1/jobs/999: 404: ", 23) == 0);
  exlr8_free_string(json);

  /* A bad field: the server's message, naming it. */
  exlr8_pull_request_init(&bad);
  bad.repo = "exlr8/test";
  bad.manifest = "home";
  bad.tp = 2;
  bad.rank = 5;
  REQUIRE(exlr8_api_submit_pull(api, &bad, &id, NULL) == EXLR8_INVALID_ARGUMENT);
  REQUIRE(strstr(exlr8_last_error_message(), "POST /v1/pulls: 400: ") != NULL);
  REQUIRE(strstr(exlr8_last_error_message(), "rank") != NULL);
  REQUIRE(id == 0);
  /* No repo: refused before any request. */
  bad.repo = NULL;
  REQUIRE(exlr8_api_submit_pull(api, &bad, &id, NULL) == EXLR8_INVALID_ARGUMENT);
  REQUIRE(strstr(exlr8_last_error_message(), "repo is required") != NULL);

  exlr8_api_close(api);
  exlr8_api_close(NULL);
  exlr8_free_string(NULL);
  printf("ok: %u filesets\n", (unsigned)count);
  return 0;
}
