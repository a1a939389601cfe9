package redistest

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestClusterForms(t *testing.T) {
	c := StartCluster(t)
	co, err := redis.ParseClusterURL(c.URL())
	if err != nil || len(co.Addrs) != 3 {
		t.Fatalf("URL %q: %v %v", c.URL(), co, err)
	}
	cc := redis.NewClusterClient(co)
	defer cc.Close()
	ctx := context.Background()
	owners := map[string]bool{}
	for i := 0; i < 30; i++ {
		k := "k" + strconv.Itoa(i)
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		owners[m.Options().Addr] = true
	}
	if len(owners) != 3 {
		t.Fatalf("30 keys on %d masters, want 3", len(owners))
	}
}
