// The REST client's HTTP answer reader (client/exlr8client/http_response.h)
// and endpoint parsing (rest_client.h): one test per rule, each refused
// answer with the error it gets.
#include "client/exlr8client/http_response.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "client/exlr8client/rest_client.h"

namespace exlr8::rest {
namespace {

using ::testing::HasSubstr;

// Feeds `text` whole (or a byte at a time) then the connection's end.
Status ReadAll(HttpResponseParser& p, const std::string& text, bool bytewise = false) {
  Status s = NeedMoreError("");
  if (bytewise) {
    for (char c : text) {
      s = p.Feed(std::string_view(&c, 1));
      if (s.code() != StatusCode::kNeedMore) return s;
    }
  } else {
    s = p.Feed(text);
    if (s.code() != StatusCode::kNeedMore) return s;
  }
  return p.Finish();
}

Status Refused(const std::string& text, HttpLimits limits = {}) {
  HttpResponseParser p(limits);
  return ReadAll(p, text);
}

TEST(HttpResponseTest, ReadsAContentLengthBodyWholeOrByteByByte) {
  const std::string text =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length:  7 \r\n\r\n{\"a\":1}";
  for (bool bytewise : {false, true}) {
    HttpResponseParser p;
    ASSERT_TRUE(ReadAll(p, text, bytewise).ok());
    EXPECT_EQ(p.response().status, 200);
    EXPECT_EQ(p.response().reason, "OK");
    EXPECT_EQ(p.response().body, "{\"a\":1}");
    ASSERT_NE(p.response().Header("content-type"), nullptr);
    EXPECT_EQ(*p.response().Header("content-type"), "application/json");
    EXPECT_EQ(p.offset(), text.size());
  }
}

TEST(HttpResponseTest, CompletesAtTheEndOfTheBodyWithoutWaitingForTheConnection) {
  HttpResponseParser p;
  EXPECT_TRUE(p.Feed("HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}trailing garbage").ok());
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.response().status, 404);
  EXPECT_EQ(p.response().body, "{}");
}

TEST(HttpResponseTest, ReadsAChunkedBodyWithExtensionsAndTrailers) {
  const std::string text =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"
      "4;name=value\r\nabcd\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n";
  for (bool bytewise : {false, true}) {
    HttpResponseParser p;
    ASSERT_TRUE(ReadAll(p, text, bytewise).ok());
    EXPECT_EQ(p.response().body, "abcd0123456789");
  }
}

TEST(HttpResponseTest, ABodyWithoutFramingEndsWithTheConnection) {
  HttpResponseParser p;
  EXPECT_EQ(p.Feed("HTTP/1.0 200 OK\r\n\r\nsome").code(), StatusCode::kNeedMore);
  EXPECT_EQ(p.Feed(" text").code(), StatusCode::kNeedMore);
  ASSERT_TRUE(p.Finish().ok());
  EXPECT_EQ(p.response().body, "some text");
}

TEST(HttpResponseTest, NoBodyFor204And304AndHead) {
  HttpResponseParser a;
  EXPECT_TRUE(a.Feed("HTTP/1.1 204 No Content\r\n\r\n").ok());
  HttpResponseParser b(HttpLimits{}, /*head=*/true);
  EXPECT_TRUE(b.Feed("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n").ok());
  EXPECT_TRUE(b.response().body.empty());
}

TEST(HttpResponseTest, SkipsAnInterimAnswer) {
  HttpResponseParser p;
  ASSERT_TRUE(
      ReadAll(p, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n").ok());
  EXPECT_EQ(p.response().status, 201);
  EXPECT_THAT(Refused("HTTP/1.1 101 Switching Protocols\r\n\r\n").message(), HasSubstr("101"));
}

TEST(HttpResponseTest, RefusesAnAnswerThatIsNotHttp) {
  Status s = Refused("SSH-2.0-OpenSSH_9.6\r\n");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("HTTP answer byte 0: not an HTTP/1.x status line: \"SSH-2.0"));
  EXPECT_THAT(Refused("HTTP/1.1 2x0 OK\r\n\r\n").message(), HasSubstr("not 3 digits"));
  EXPECT_THAT(Refused("HTTP/1.1 099 Low\r\n\r\n").message(), HasSubstr("out of range"));
  EXPECT_THAT(Refused("HTTP/1.1 600 High\r\n\r\n").message(), HasSubstr("out of range"));
  EXPECT_THAT(Refused("HTTP/1.1 200OK\r\n\r\n").message(), HasSubstr("no space after the status code"));
  EXPECT_THAT(Refused("HTTP/1.1 200 O\x01K\r\n\r\n").message(), HasSubstr("control character (byte 0x01)"));
  EXPECT_THAT(Refused("HTTP/2 200 OK\r\n\r\n").message(), HasSubstr("not an HTTP/1.x status line"));
}

TEST(HttpResponseTest, RefusesBareLineFeeds) {
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\n\n").message(),
              HasSubstr("byte 0: the header section ends in a bare LF"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nA: b\n\r\n").message(),
              HasSubstr("byte 17: the header section ends"));
}

TEST(HttpResponseTest, RefusesMalformedFields) {
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n").message(), HasSubstr("obsolete line folding"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nNo colon\r\n\r\n").message(), HasSubstr("without ':'"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\n: v\r\n\r\n").message(), HasSubstr("without a name"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nA b: v\r\n\r\n").message(), HasSubstr("name with ' '"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nA: v\x7f\r\n\r\n").message(),
              HasSubstr("control character (byte 0x7f)"));
  std::string many = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 300; ++i) many += "A: b\r\n";
  EXPECT_THAT(Refused(many + "\r\n").message(), HasSubstr("more than 256 header fields"));
}

TEST(HttpResponseTest, RefusesBadOrConflictingFraming) {
  const std::string h = "HTTP/1.1 200 OK\r\n";
  EXPECT_THAT(Refused(h + "Content-Length: -1\r\n\r\n").message(),
              HasSubstr("Content-Length \"-1\" is not a number"));
  EXPECT_THAT(Refused(h + "Content-Length: 1 2\r\n\r\n").message(), HasSubstr("is not a number"));
  EXPECT_THAT(Refused(h + "Content-Length: 99999999999999999999\r\n\r\n").message(),
              HasSubstr("is not a number"));
  EXPECT_THAT(Refused(h + "Content-Length: 1\r\nContent-Length: 2\r\n\r\n").message(),
              HasSubstr("two different Content-Length values"));
  EXPECT_TRUE(Refused(h + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx").ok());
  EXPECT_THAT(Refused(h + "Transfer-Encoding: gzip, chunked\r\n\r\n").message(),
              HasSubstr("Transfer-Encoding \"gzip, chunked\" (only chunked is read)"));
  EXPECT_THAT(Refused(h + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").message(),
              HasSubstr("both Content-Length and Transfer-Encoding"));
}

TEST(HttpResponseTest, RefusesBadChunks) {
  const std::string h = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_THAT(Refused(h + "xyz\r\n").message(), HasSubstr("the chunk size \"xyz\" is not hexadecimal"));
  EXPECT_THAT(Refused(h + "\r\n").message(), HasSubstr("a chunk size is missing"));
  EXPECT_THAT(Refused(h + "11111111111111111\r\n").message(), HasSubstr("overflows"));
  EXPECT_THAT(Refused(h + "2\r\nabc\r\n").message(), HasSubstr("a chunk is longer than its size"));
  EXPECT_THAT(Refused(h + std::string(2000, '1')).message(),
              HasSubstr("a chunk-size line is longer than 1024"));
}

TEST(HttpResponseTest, BoundsTheHeaderAndTheBody) {
  HttpLimits small;
  small.max_header_bytes = 64;
  small.max_body_bytes = 10;
  // An endless header line fails once over the limit, not at its end.
  HttpResponseParser endless(small);
  Status s = endless.Feed("HTTP/1.1 200 OK\r\nX: " + std::string(100, 'a'));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("the header section over the limit of 64 bytes"));
  s = Refused("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", small);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("a body of 11 bytes is over the limit of 10 bytes"));
  EXPECT_TRUE(Refused("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", small).ok());
  s = Refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n3\r\n", small);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("a chunk of 3 bytes takes the body over the limit of 10 bytes"));
  s = Refused("HTTP/1.1 200 OK\r\n\r\n0123456789A", small);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  // The default limits: 64 KiB of header, 64 MiB of body.
  EXPECT_EQ(HttpLimits{}.max_header_bytes, 65536u);
  EXPECT_EQ(HttpLimits{}.max_body_bytes, 64u << 20);
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nContent-Length: 67108865\r\n\r\n").message(),
              HasSubstr("67108865 bytes is over the limit of 67108864"));
}

TEST(HttpResponseTest, AnAnswerCutShortSaysWhere) {
  EXPECT_THAT(Refused("").message(), HasSubstr("closed the connection without an answer"));
  EXPECT_THAT(Refused("HTTP/1.1 2").message(), HasSubstr("closed in the status line"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nA: b\r\n").message(), HasSubstr("closed in the header section"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n0123456789").message(),
              HasSubstr("closed in the body after 10 of 20 bytes"));
  EXPECT_THAT(Refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").message(),
              HasSubstr("closed in the chunked body after 2 bytes"));
}

TEST(HttpResponseTest, AfterAnErrorEveryCallReturnsIt) {
  HttpResponseParser p;
  const Status first = p.Feed("garbage\r\n");
  EXPECT_FALSE(first.ok());
  EXPECT_EQ(p.Feed("HTTP/1.1 200 OK\r\n\r\n").message(), first.message());
  EXPECT_EQ(p.Finish().message(), first.message());
}

TEST(RestEndpointTest, ReadsUnixAndHttpEndpoints) {
  auto u = ParseEndpoint("unix:/run/exlr8d/api.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->unix_socket);
  EXPECT_EQ(u->path, "/run/exlr8d/api.sock");
  EXPECT_EQ(u->authority, "localhost");
  ASSERT_TRUE(ParseEndpoint("/var/cache/exlr8/exlr8d.sock").ok());
  auto h = ParseEndpoint("http://127.0.0.1:8478/api/");
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->unix_socket);
  EXPECT_EQ(h->host, "127.0.0.1");
  EXPECT_EQ(h->port, "8478");
  EXPECT_EQ(h->prefix, "/api");
  EXPECT_EQ(h->authority, "127.0.0.1:8478");
  auto v6 = ParseEndpoint("http://[::1]:99");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(ParseEndpoint("http://localhost")->port, "80");
}

TEST(RestEndpointTest, RefusesWhatItCannotReach) {
  for (const auto& [text, what] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty"},
           {"unix:relative.sock", "must be absolute"},
           {"unix:/" + std::string(200, 'a'), "longer than 107 bytes"},
           {"https://127.0.0.1:1", "not https"},
           {"ftp://x", "not \"unix:PATH\""},
           {"http://:80", "no host"},
           {"http://h:0", "is not 1..65535"},
           {"http://h:65536", "is not 1..65535"},
           {"http://h:8x", "is not 1..65535"},
           {"http://user@h:1", "user"},
           {"http://[::1", "no ']'"}}) {
    auto r = ParseEndpoint(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(r.status().message(), HasSubstr(what)) << text;
  }
}

TEST(RestEndpointTest, EscapesQueryValues) { EXPECT_EQ(QueryEscape("exlr8/a b&c~"), "exlr8%2Fa%20b%26c~"); }

}  // namespace
}  // namespace exlr8::rest
