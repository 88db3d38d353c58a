package testenv

import (
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Bigtable's read methods: all that a principal with read access to a table's rows
// may call, and the admin read of a table's schema.
const (
	MethodReadRows      = "/google.bigtable.v2.Bigtable/ReadRows"
	MethodSampleRowKeys = "/google.bigtable.v2.Bigtable/SampleRowKeys"
	MethodGetTable      = "/google.bigtable.admin.v2.BigtableTableAdmin/GetTable"
)

// GateProxy is a gRPC proxy in front of a Bigtable emulator that forwards only the
// methods it allows and refuses every other with PermissionDenied, as Bigtable does a
// principal without the permission: a Bigtable to which the test grants only some
// access. It records every method called, allowed or not.
type GateProxy struct {
	addr    string
	allowed []string
	mu      sync.Mutex
	calls   []string
}

// Addr is the address to dial instead of the emulator.
func (p *GateProxy) Addr() string { return p.addr }

// Calls returns the methods called so far, in order, and forgets them.
func (p *GateProxy) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := p.calls
	p.calls = nil
	return calls
}

// Gate starts a GateProxy to the emulator at upstream that allows the methods
// allowed; it stops when the test ends.
func Gate(tb testing.TB, upstream string, allowed ...string) *GateProxy {
	tb.Helper()
	up, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &GateProxy{addr: ln.Addr().String(), allowed: allowed}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		return p.forward(up, ss)
	}), grpc.MaxRecvMsgSize(256<<20), grpc.MaxSendMsgSize(256<<20))
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() {
		srv.Stop()
		up.Close()
	})
	return p
}

// forward relays one call, messages as they are, in both directions.
func (p *GateProxy) forward(up *grpc.ClientConn, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	p.mu.Lock()
	p.calls = append(p.calls, method)
	p.mu.Unlock()
	if !slices.Contains(p.allowed, method) {
		return status.Errorf(codes.PermissionDenied, "the test grants no permission for %s", method)
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	ctx := metadata.NewOutgoingContext(ss.Context(), md.Copy())
	cs, err := up.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method,
		grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20))
	if err != nil {
		return err
	}
	go func() {
		for {
			var b []byte
			if err := ss.RecvMsg(&b); err != nil {
				_ = cs.CloseSend()
				return
			}
			if err := cs.SendMsg(&b); err != nil {
				return
			}
		}
	}()
	if hdr, err := cs.Header(); err == nil {
		_ = ss.SendHeader(hdr)
	}
	for {
		var b []byte
		if err := cs.RecvMsg(&b); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(&b); err != nil {
			return err
		}
	}
}

// rawCodec passes messages through as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
