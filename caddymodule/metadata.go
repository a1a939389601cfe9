package caddymodule

import (
	"encoding/base64"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// maxMissionMetadata bounds X-Supervaize-Mission-Metadata: 4096 bytes encoded.
const maxMissionMetadata = 4096

// checkMissionMetadata validates X-Supervaize-Mission-Metadata on a
// DataResource request (docs/sdk-wire.md, "DataResource routes"): absent
// is fine; present, it must come with X-Supervaize-Mission-Id, be at most
// 4096 bytes, be base64url (padding optional) of UTF-8 JSON that is one
// object (no duplicate keys). It returns "" or the 400 detail.
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
		return "X-Supervaize-Mission-Metadata is larger than 4096 bytes"
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
	if err != nil {
		return "X-Supervaize-Mission-Metadata is not base64url"
	}
	if !utf8.Valid(raw) || !jsonrpc.IsJSONObject(raw) {
		return "X-Supervaize-Mission-Metadata must be a JSON object"
	}
	return ""
}
