// The X-Supervaize-Mission-Metadata check of DataResource requests.

package gate

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// maxMissionMetadata bounds X-Supervaize-Mission-Metadata: 4096 bytes encoded.
const maxMissionMetadata = 4096

// checkMissionMetadata validates X-Supervaize-Mission-Metadata on a
// DataResource request (docs/sdk-wire.md, "DataResource routes"): absent
// is fine; present, it must come with X-Supervaize-Mission-Id, be at most
// 4096 bytes, be base64url (padding optional, correct when present) of UTF-8 JSON that
// is one object (no duplicate keys). It returns "" or the 400 detail, in
// the SDK 1.8.0 server's words (test/sdk_reference_test.go).
func checkMissionMetadata(h http.Header) string {
	values := h.Values(headerMissionMetadata)
	if len(values) == 0 {
		return ""
	}
	v := values[0]
	if strings.TrimSpace(h.Get(headerMissionID)) == "" {
		return "X-Supervaize-Mission-Metadata requires X-Supervaize-Mission-Id"
	}
	if len(v) > maxMissionMetadata {
		return "X-Supervaize-Mission-Metadata is " + strconv.Itoa(len(v)) + " bytes; the limit is 4096"
	}
	const notJSON = "X-Supervaize-Mission-Metadata is not base64url-encoded UTF-8 JSON"
	// As the SDK: at most two "=", then padded to a multiple of 4, which
	// must be correct padded base64url ("e30=" passes, "e30==" does not).
	if len(v)-len(strings.TrimRight(v, "=")) > 2 {
		return notJSON
	}
	raw, err := base64.URLEncoding.DecodeString(v + strings.Repeat("=", (4-len(v)%4)%4))
	if err != nil || !utf8.Valid(raw) || !json.Valid(raw) {
		return notJSON
	}
	if !jsonrpc.IsJSONObject(raw) {
		return "X-Supervaize-Mission-Metadata must decode to a JSON object"
	}
	return ""
}
