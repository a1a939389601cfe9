package grants_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestParseJWKS: the exported parse applies the JWKS source's rule: usable
// kids in document order, skipped kids sorted, and the fetch error reasons
// of a document that is not a JWKS or has no usable key.
func TestParseJWKS(t *testing.T) {
	a, b := newSigner(t, "a"), newSigner(t, "b")
	enc := b.jwk()
	enc["kid"], enc["use"] = "enc", "enc"
	doc, _ := json.Marshal(map[string]any{"keys": []any{b.jwk(), enc, a.jwk()}})
	keys, err := grants.ParseJWKS(doc)
	if err != nil || !reflect.DeepEqual(keys, grants.JWKSKeys{Usable: []string{"b", "a"}, Unusable: []string{"enc"}}) {
		t.Fatalf("ParseJWKS: %+v, %v", keys, err)
	}
	onlyEnc, _ := json.Marshal(map[string]any{"keys": []any{enc}})
	for _, c := range []struct {
		doc    []byte
		reason string
	}{{onlyEnc, "no_usable_key"}, {[]byte(`{"keys":"none"}`), "invalid_document"}, {[]byte(`[]`), "invalid_document"},
		{[]byte(`{"keys":[1]}`), "invalid_document"}, {[]byte(`not json`), "invalid_document"}} {
		if _, err := grants.ParseJWKS(c.doc); grants.JWKSFetchErrorReason(err) != c.reason {
			t.Errorf("%s: %v, want %s", c.doc, err, c.reason)
		}
	}
	srv := startJWKS(t, a.jwk())
	if keys, err := grants.FetchJWKS(context.Background(), http.DefaultClient, srv.url()); err != nil || len(keys.Usable) != 1 {
		t.Fatalf("FetchJWKS: %+v, %v", keys, err)
	}
	srv.setDoc(http.StatusNotFound, nil)
	if _, err := grants.FetchJWKS(context.Background(), http.DefaultClient, srv.url()); grants.JWKSFetchErrorReason(err) != "http_status" {
		t.Fatalf("FetchJWKS of a 404: %v", err)
	}
}
