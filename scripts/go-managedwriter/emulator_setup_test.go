// Added to Google's managedwriter test package (by an overlay, at test time) by
// scripts/test.d/go-managedwriter.sh: the client options that point Google's integration tests at
// the emulator. Only the setup changes: the endpoint, no credentials, gRPC without TLS.

package managedwriter

import (
	"os"
	"slices"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// emulatorWriteOptions: the Storage Write API over plaintext HTTP/2 at KBQ_EMULATOR_ADDR.
func emulatorWriteOptions(opts []option.ClientOption) []option.ClientOption {
	return slices.Concat(opts, []option.ClientOption{
		option.WithEndpoint(os.Getenv("KBQ_EMULATOR_ADDR")),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	})
}

// emulatorRESTOptions: the BigQuery REST API on the same port.
func emulatorRESTOptions(opts []option.ClientOption) []option.ClientOption {
	return slices.Concat(opts, []option.ClientOption{
		option.WithEndpoint("http://" + os.Getenv("KBQ_EMULATOR_ADDR") + "/bigquery/v2/"),
		option.WithoutAuthentication(),
	})
}
