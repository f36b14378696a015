// Command txmanager-service runs the EVM transaction manager.
package main

import "fmt"

func main() {
	fmt.Println("txmanager-service")
}
