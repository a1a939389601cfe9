package caddymodule

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestIntrospectionCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`supervaizer_auth {
		workspace_auth {
			introspection {
				url https://studio.test/introspect
				client_id sidecar
				client_secret {env.SECRET}
				timeout 1s
				cache_ttl 5s
				negative_cache_ttl 1s
				cache_size 100
				actions job.start resource.*.delete
			}
		}
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	ic := h.WorkspaceAuth.Introspection
	if ic == nil || ic.URL != "https://studio.test/introspect" || ic.ClientSecret != "{env.SECRET}" || ic.CacheSize != 100 ||
		len(ic.Actions) != 2 || ic.Timeout == 0 {
		t.Fatalf("parsed %+v", ic)
	}
	for _, bad := range []string{
		"supervaizer_auth {\nworkspace_auth {\nintrospection {\nnope x\n}\n}\n}",
		"supervaizer_auth {\nworkspace_auth {\nintrospection {\ntimeout 0s\n}\n}\n}",
		"supervaizer_auth {\nworkspace_auth {\nintrospection {\nactions\n}\n}\n}",
		"supervaizer_auth {\nworkspace_auth {\nintrospection extra {\n}\n}\n}",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
